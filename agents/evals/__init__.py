"""Evals: cases as data, checks, and the runner that stores EvalRun / EvalResult rows."""

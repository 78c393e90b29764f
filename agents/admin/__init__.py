"""The operator console (Django's admin), one module per page; Django's autodiscovery imports this package.

runs: runs and their traces; threads; approvals: the pending-approvals queue; agents: agent configurations; usage:
token usage and quotas; webhooks: webhook endpoints and deliveries; base: what the pages share. Eval pages live with
the evals (agents/evals/admin.py).
"""

from agents.admin import agents, approvals, runs, threads, usage, webhooks  # noqa: F401  (each registers its pages)

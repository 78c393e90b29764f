"""What the site tells an operator's tools: traces (tracing.py) and metrics, each switched on by its settings."""

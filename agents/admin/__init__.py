"""The operator console (Django's admin), one module per page; Django's autodiscovery imports this package.

runs: runs, threads, approvals, actions; agents: agent configurations; usage: token usage and quotas; webhooks: webhook
endpoints and deliveries. Eval pages live with the evals (agents/evals/admin.py).
"""

from agents.admin import agents, runs, usage, webhooks  # noqa: F401  (each registers its pages)

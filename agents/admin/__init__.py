"""The operator console (Django's admin), one module per page; Django's autodiscovery imports this package.

runs: runs and their traces; threads; approvals: the pending-approvals queue; agents: agent configurations; usage:
token usage, spend and quotas; prices: model prices; webhooks: webhook endpoints and deliveries; keys: users' API
keys (list, revoke); audit: the log entries (who changed or deleted what); schedules: scheduled runs; filters: the
run list's own filters; base: what the pages share. Eval pages live with the evals (agents/evals/admin.py).
"""

from django.contrib import admin

from agents.admin import (  # noqa: F401  (each registers its pages)
    agents,
    approvals,
    audit,
    keys,
    prices,
    runs,
    schedules,
    threads,
    usage,
    webhooks,
)

# The pages are wide tables: the menu beside them took 300 px of a 1400 px screen and cut off the runs list. The
# index lists every page, and the breadcrumbs lead back to it.
admin.site.enable_nav_sidebar = False

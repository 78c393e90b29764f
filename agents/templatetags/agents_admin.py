from django import template

from agents.admin.usage import dashboard_stats

register = template.Library()


@register.inclusion_tag("admin/agents/_dashboard.html")
def run_dashboard() -> dict:
    return dashboard_stats()

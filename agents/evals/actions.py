"""The runs admin's "Make eval case" action: the selected runs as an eval cases file, downloaded.

Add it to a ModelAdmin of runs: `actions = [..., make_eval_case]` (from agents.evals.actions import make_eval_case).
The same rules as `manage.py export_cases`, with the signed-in user as the exporter (agents.evals.export).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from agents.evals import export
from agents.models import Run


@admin.action(description="Make eval case")
def make_eval_case(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse | None:
    """Download the selected runs as eval cases (YAML); nothing at all when one of them is not the user's to see."""
    run_ids = [str(pk) for pk in queryset.values_list("pk", flat=True)]
    try:
        runs = export.select_runs(user=request.user, run_ids=run_ids)
    except export.RunNotFound as exc:
        modeladmin.message_user(request, f"{exc} No eval case was made.", messages.ERROR)
        return None
    exported = export.export_cases(runs=runs, exporter=request.user)
    if not exported.cases:
        modeladmin.message_user(request, "No eval case was made: " + " ".join(exported.skipped), messages.WARNING)
        return None
    response = HttpResponse(export.to_yaml(exported, request.user), content_type="text/yaml; charset=utf-8")
    name = f"eval-cases-{timezone.now():%Y%m%d-%H%M%S}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response

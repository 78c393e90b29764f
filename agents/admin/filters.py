"""The run list's own filters: runs with an expired approval, eval runs (hidden unless asked for) and owners (without
the eval users unless eval runs are shown)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q
from django.http import HttpRequest

from agents.evals.runner import eval_users
from agents.models import Step, StepKind
from agents.runs import review, search


class ApprovalExpiredFilter(admin.SimpleListFilter):
    """Runs with a call the system denied because nobody decided in time (`reviewer: null`, `reason: "expired"`)."""

    title = "approval expired"
    parameter_name = "approval_expired"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        # One EXISTS per run over its own steps (the (run, index) index), never a scan of every step.
        expired = Exists(
            Step.objects.filter(
                run=OuterRef("pk"), kind=StepKind.APPROVAL, data__reason=review.EXPIRED, data__reviewer=None
            )
        )
        if self.value() == "yes":
            return queryset.filter(expired)
        if self.value() == "no":
            return queryset.filter(~expired)
        return queryset


class EvalRunsFilter(admin.SimpleListFilter):
    """The runs of eval cases (each case runs as its own eval user) are hidden unless asked for: an eval run makes
    one per case and protocol, and they would bury the runs of people."""

    title = "eval runs"
    parameter_name = "eval_runs"
    SHOWN, ONLY = "shown", "only"

    def lookups(self, request, model_admin):
        return [(self.SHOWN, "Shown"), (self.ONLY, "Only")]

    def queryset(self, request, queryset):
        if self.value() == self.ONLY:
            return queryset.filter(eval_users("owner__"))
        if self.value() == self.SHOWN:
            return queryset
        return queryset.exclude(eval_users("owner__"))

    def choices(self, changelist):
        first, *rest = super().choices(changelist)
        return [{**first, "display": "Hidden"}, *rest]  # no parameter means hidden, not "All"

    @classmethod
    def shows_eval_runs(cls, request: HttpRequest) -> bool:
        return request.GET.get(cls.parameter_name) in (cls.SHOWN, cls.ONLY)


class OwnerFilter(admin.RelatedOnlyFieldListFilter):
    """The owners of runs; the eval users (one per eval case) only while eval runs are shown."""

    def field_choices(self, field, request, model_admin):
        owners = Q(pk__in=model_admin.get_queryset(request).values("owner_id"))
        if not EvalRunsFilter.shows_eval_runs(request):
            owners &= ~eval_users()
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(include_blank=False, limit_choices_to=owners, ordering=ordering)


class MetadataFilter(admin.SimpleListFilter):
    """Runs by a metadata pair, as `?metadata.<key>=<value>` finds them over the API (agents/runs/search.py): the
    choices are the pairs of the latest runs that have any."""

    title = "metadata"
    parameter_name = "metadata"
    LATEST = 500
    CHOICES = 30

    def lookups(self, request, model_admin):
        pairs: dict[str, None] = {}
        recent = model_admin.get_queryset(request).exclude(metadata={}).order_by("-created_at")
        for metadata in recent.values_list("metadata", flat=True)[: self.LATEST]:
            for key, value in sorted((metadata or {}).items()):
                text = "true" if value is True else "false" if value is False else str(value)
                pairs.setdefault(f"{key}={text}")
                if len(pairs) >= self.CHOICES:
                    break
        return [(pair, pair) for pair in sorted(pairs)]

    def queryset(self, request, queryset):
        if not self.value() or "=" not in self.value():
            return queryset
        key, value = self.value().split("=", 1)
        return search.RunSearch(metadata={key: value}).apply(queryset)

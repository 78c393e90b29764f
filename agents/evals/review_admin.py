"""The reviewer's queue in the operator console: runs to label, and the cases labelled from them.

The queue (`admin:agents_labelledcase_queue`, /admin/agents/labelledcase/queue/) lists the runs that have a score
(agents.models.RunScore: an agent's online evaluator, or a person's feedback) and no labelled case yet, the lowest
score first (a failing evaluator, negative feedback), then the newest. Labelling one (`admin:agents_labelledcase_label`,
a page per run) takes a case id, the expected answer and a check type, and stores a LabelledCase whose `case` is what
`export_cases` makes of the run (agents.evals.export: its input, settings and tool outputs as fixtures, so that
`run_evals --replay` replays it) with the reviewer's check; `export_cases --labelled` writes them all as a cases file.
The export's privacy rule holds: a run that used a memory tool is labelled only by its owner.

Who: staff reviewers (agents.review_run, agents.permissions.can_review), the right that decides approvals.
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.core.validators import RegexValidator
from django.db import IntegrityError, transaction
from django.db.models import Exists, Min, OuterRef, Prefetch
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator

from agents.evals import export
from agents.evals.checks import CaseError, parse_check
from agents.evals.fixtures import canonical
from agents.models import LabelledCase, Run, RunScore
from agents.permissions import can_review

QUEUE_PAGE = 50  # runs per page of the queue
INPUT_CHARS = 80
CHECKS = [
    ("exact", "exact — the answer is this text (whitespace at its ends aside)"),
    ("contains", "contains — the answer holds this text"),
    ("regex", "regex — the answer matches this pattern"),
    ("numeric", "numeric — the answer's first number is this number"),
    ("judge", "judge — a judge model grades the answer by the rubric"),
]
DUPLICATE = "A labelled case with this id exists already: choose another id."


def review_queue():
    """Runs with a score and no labelled case, their lowest score first, then the newest; each with its scores
    (lowest first) and owner."""
    labelled = LabelledCase.objects.filter(run=OuterRef("pk"))
    scores = Prefetch("scores", queryset=RunScore.objects.order_by("score", "created_at"), to_attr="queued_scores")
    return (
        Run.objects.annotate(lowest_score=Min("scores__score"))
        .filter(lowest_score__isnull=False)
        .filter(~Exists(labelled))
        .select_related("owner")
        .prefetch_related(scores)
        .order_by("lowest_score", "-created_at", "pk")
    )


class LabelForm(forms.Form):
    """A reviewer's label of one run: the case's id, the expected answer and the check that holds the answer to it."""

    case_id = forms.CharField(
        max_length=100,
        validators=[RegexValidator(r"^[\w.:-]+$", "Use letters, digits, '.', ':', '-' and '_' only (no spaces).")],
        help_text="the case's id in the cases file (unique)",
    )
    check_type = forms.ChoiceField(choices=CHECKS, initial="exact", label="check")
    expected = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        label="expected answer",
        help_text="the text, pattern or number the answer is checked against; with judge, added to the rubric",
    )
    ignore_case = forms.BooleanField(required=False, help_text="contains: ignore upper and lower case")
    rubric = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="judge: what a good answer does",
    )

    def __init__(self, *args: Any, run: Run, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run, self.user = run, user
        self.case: dict[str, Any] | None = None

    def clean_case_id(self) -> str:
        case_id = self.cleaned_data["case_id"]
        if LabelledCase.objects.filter(case_id=case_id).exists():
            raise forms.ValidationError(DUPLICATE)
        return case_id

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind = data.get("check_type")
        check = self._check(kind, data) if kind else None
        if check is None:
            return data
        try:
            parse_check(check, "check")  # the rule a cases file's check is read by
        except CaseError as exc:
            self.add_error("rubric" if kind == "judge" else "expected", str(exc))
            return data
        if "case_id" not in data:  # its own error is said already
            return data
        try:
            self.case = export.labelled_case(self.run, labeller=self.user, case_id=data["case_id"], check=check)
        except export.Unlabellable as exc:
            raise forms.ValidationError(str(exc)) from None
        return data

    def _check(self, kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
        """The check from the form's fields, or None (with the field's error) when one is missing."""
        raw = (data.get("expected") or "").replace("\r\n", "\n")  # a browser's text area sends CRLF
        expected = raw if kind == "regex" else raw.strip()
        if kind == "judge":
            rubric = (data.get("rubric") or "").replace("\r\n", "\n").strip()
            if not rubric:
                self.add_error("rubric", "A judge check needs a rubric.")
                return None
            return {"type": "judge", "rubric": rubric + (f"\n\nThe expected answer: {expected}" if expected else "")}
        if not expected.strip():
            self.add_error("expected", f"The {kind} check needs the expected answer.")
            return None
        if kind == "numeric":
            number = _number(expected)
            if number is None:
                self.add_error("expected", f"A numeric check needs a number, not {Truncator(expected).chars(40)!r}.")
                return None
            return {"type": "numeric", "value": number}
        if kind == "contains" and data.get("ignore_case"):
            return {"type": "contains", "value": expected, "ignore_case": True}
        return {"type": kind, "value": expected}


def _shown(fixture: dict[str, Any]) -> dict[str, Any]:
    """A fixture as the label page shows it: its arguments as JSON, what the tool answered (or why it was denied)."""
    answer = fixture.get("output", fixture.get("reason") or "")
    return {"tool": fixture["tool"], "arguments": canonical(fixture["arguments"]), "answer": answer,
            "denied": bool(fixture.get("denied"))}  # fmt: skip


def _number(text: str) -> int | float | None:
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if math.isfinite(value) else None
    return None


@admin.register(LabelledCase)
class LabelledCaseAdmin(admin.ModelAdmin):
    """The cases reviewers labelled (read-only; `export_cases --labelled` writes them), and the queue of runs to
    label."""

    list_display = ["case_id", "source_run", "check_type", "fixture_count", "created_by", "created_at"]
    list_select_related = ["created_by"]
    search_fields = ["case_id"]
    fields = ["case_id", "source_run", "created_by", "created_at", "case_text"]
    readonly_fields = fields
    change_list_template = "admin/agents/review/labelledcase_change_list.html"
    actions = ["download"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return super().has_view_permission(request, obj) or can_review(request.user)

    def get_urls(self):
        queue = self.admin_site.admin_view(self.queue_view)
        label = self.admin_site.admin_view(self.label_view)
        return [
            path("queue/", queue, name="agents_labelledcase_queue"),
            path("queue/<uuid:run_id>/", label, name="agents_labelledcase_label"),
            *super().get_urls(),
        ]

    @admin.display(description="run")
    def source_run(self, labelled: LabelledCase) -> str:
        if labelled.run_id is None:
            return "— (deleted)"
        url = reverse("admin:agents_run_change", args=[labelled.run_id])
        return format_html('<a href="{}">{}</a>', url, str(labelled.run_id)[:8])

    @admin.display(description="check")
    def check_type(self, labelled: LabelledCase) -> str:
        check = labelled.case.get("check") if isinstance(labelled.case, dict) else None
        return str(check.get("type", "?")) if isinstance(check, dict) else "?"

    @admin.display(description="fixtures")
    def fixture_count(self, labelled: LabelledCase) -> int:
        return len(labelled.case.get("fixtures") or []) if isinstance(labelled.case, dict) else 0

    @admin.display(description="case")
    def case_text(self, labelled: LabelledCase) -> str:
        text = export.labelled_yaml([labelled.case])
        return format_html("<pre>{}</pre>", "\n".join(line for line in text.splitlines() if not line.startswith("# ")))

    @admin.action(description="Download as a cases file")
    def download(self, request, queryset) -> HttpResponse:
        cases = list(queryset.order_by("created_at", "pk").values_list("case", flat=True))
        response = HttpResponse(export.labelled_yaml(cases), content_type="text/yaml; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="labelled-cases-{timezone.now():%Y%m%d-%H%M%S}.yaml"'
        return response

    # --- the queue -------------------------------------------------------------------------------------------------

    def _reviewer(self, request: HttpRequest) -> None:
        if not can_review(request.user):
            raise PermissionDenied

    def queue_view(self, request: HttpRequest) -> HttpResponse:
        """Runs to label, the lowest score first."""
        self._reviewer(request)
        page = Paginator(review_queue(), QUEUE_PAGE).get_page(request.GET.get("p"))
        rows = [
            {
                "run": run,
                "url": reverse("admin:agents_run_change", args=[run.pk]),
                "label_url": reverse("admin:agents_labelledcase_label", args=[run.pk]),
                "input": Truncator(" ".join(run.input.split())).chars(INPUT_CHARS),
                "scores": run.queued_scores,
            }
            for run in page
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Review queue",
            "rows": rows,
            "page": page,
            "opts": self.model._meta,
            "labelled_count": LabelledCase.objects.count(),
        }
        return render(request, "admin/agents/review/queue.html", context)

    def label_view(self, request: HttpRequest, run_id) -> HttpResponse:
        """Label one run: the form, and what the case will hold (its input, answer, fixtures and what it leaves out)."""
        self._reviewer(request)
        try:
            [run] = export.select_runs(user=request.user, run_ids=[str(run_id)])  # the export's visibility rule
        except export.RunNotFound:
            raise Http404("No such run.") from None
        initial = {"case_id": f"run-{run.pk.hex[:8]}", "expected": run.output or ""}
        form = LabelForm(request.POST or None, run=run, user=request.user, initial=initial)
        if request.method == "POST" and form.is_valid() and form.case is not None:
            try:
                with transaction.atomic():
                    LabelledCase.objects.create(
                        run=run, case_id=form.case["id"], case=form.case, created_by=request.user
                    )
            except IntegrityError:  # the same id, labelled meanwhile by someone else
                form.add_error("case_id", DUPLICATE)
            else:
                self.message_user(request, f"Run {str(run.pk)[:8]} is labelled as case {form.case['id']}.")
                return HttpResponseRedirect(reverse("admin:agents_labelledcase_queue"))
        elif request.method == "POST":
            self.message_user(request, "The run was not labelled: see the errors below.", messages.ERROR)
        memory = export.memory_tools_used(run)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Label run {str(run.pk)[:8]}",
            "run": run,
            "run_url": reverse("admin:agents_run_change", args=[run.pk]),
            "form": form,
            "fixtures": [_shown(f) for f in export.fixtures(run.recorded_steps)],
            "notes": export.left_out(run),
            "scores": run.scores.order_by("score", "created_at"),
            "labelled": LabelledCase.objects.filter(run=run).values_list("case_id", flat=True),
            "memory_owner_only": bool(memory) and run.owner_id != request.user.pk,
            "memory": " and ".join(memory),
            "opts": self.model._meta,
        }
        return render(request, "admin/agents/review/label.html", context)

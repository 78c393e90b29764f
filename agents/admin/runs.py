"""The runs page: read-only runs with their traces, the pending calls of a paused run and its decisions."""

from __future__ import annotations

import json
import re

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from agents import errors
from agents.admin.base import INPUT_CHARS, ReadOnlyAdmin, thread_label
from agents.admin.filters import ApprovalExpiredFilter, EvalRunsFilter, MetadataFilter, OwnerFilter
from agents.engine import parts, prompts
from agents.evals.actions import make_eval_case
from agents.models import Run, RunStatus, Step, StepKind, Thread
from agents.permissions import can_decide, can_review
from agents.runs import drive, fork, review, search, selectors
from agents.usage.prices import cost_text


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    # Ten columns fit beside the filters at 1400 px (no menu: agents/admin/__init__.py): status with its stop reason,
    # provider / model with the protocol, headers that may wrap (templates/admin/agents/run/change_list.html).
    list_display = [
        "short_id", "owner", "input_summary", "thread_title", "status_reason", "provider_model", "turns", "tokens",
        "duration", "created",
    ]  # fmt: skip
    list_filter = [
        "status",
        "stop_reason",
        "provider",
        "protocol",
        ("owner", OwnerFilter),
        EvalRunsFilter,
        ApprovalExpiredFilter,
        MetadataFilter,
        "created_at",
    ]
    search_fields = ["input", "id", "owner__username"]
    list_select_related = ["owner", "thread"]
    date_hierarchy = "created_at"
    actions = ["cancel_runs", make_eval_case]
    change_list_template = "admin/agents/run/change_list.html"
    change_form_template = "admin/agents/run/change_form.html"
    fields = [
        "id",
        "owner",
        "input",
        "status",
        "stop_reason",
        "output",
        "error",
        "provider",
        "model",
        "protocol",
        "mode",
        "created_at",
        "duration",
        "thread_link",
        "scores",
    ]
    readonly_fields = ["created_at", "duration", "thread_link", "scores"]

    @admin.display(description="scores")
    def scores(self, run: Run) -> str:
        """Its online evaluators' scores and people's feedback (docs/evals.md), oldest first."""
        rows = [
            (s.name, f"{s.score:.2f}", {True: "pass", False: "fail", None: s.source}[s.passed], s.reason or s.comment)
            for s in run.scores.all()
        ]
        if not rows:
            return "—"
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{} {} ({}) {}</li>", rows))

    @admin.display(description="run", ordering="id")
    def short_id(self, run: Run) -> str:
        return str(run.id)[:8]

    @admin.display(description="input", ordering="input")
    def input_summary(self, run: Run) -> str:
        """The goal on one line, cut short (the admin escapes it: it is user text), and how many images it has."""
        text = Truncator(" ".join(run.input.split())).chars(INPUT_CHARS)
        images = len(parts.images(run.input_parts))
        return f"{text} [{images} image{'s' if images > 1 else ''}]".lstrip() if images else text

    @admin.display(description="thread")
    def thread_title(self, run: Run) -> str:
        return "—" if run.thread is None else thread_label(run.thread)

    @admin.display(description="created", ordering="created_at")
    def created(self, run: Run) -> str:
        """The site's one date format (a date column of its own would not wrap between the date and the time)."""
        return date_format(timezone.localtime(run.created_at), "DATETIME_FORMAT")

    @admin.display(description="thread")
    def thread_link(self, run: Run) -> str:
        """The run's conversation on its page: a link when this user may open the thread's page (see get_object)."""
        if run.thread is None:
            return "—"
        name, url = thread_label(run.thread), getattr(run, "thread_url", "")
        if not url:
            return format_html('<span id="run-thread">{}</span>', name)
        return format_html('<span id="run-thread"><a href="{}" id="thread-link">{}</a></span>', url, name)

    @admin.display(description="status", ordering="status")
    def status_reason(self, run: Run) -> str:
        """The status, and why a done run stopped: "done: final answer"."""
        status = run.status.replace("_", " ")
        return f"{status}: {run.stop_reason.replace('_', ' ')}" if run.stop_reason else status

    @admin.display(description="provider / model", ordering="provider")
    def provider_model(self, run: Run) -> str:
        return f"{run.provider} / {run.model} ({run.protocol})"

    @admin.display(description="tokens (cost)")
    def tokens(self, run: Run) -> str:
        cost = cost_text(run.cost_nanos)
        return f"{run.total_tokens:,}" + (f" ({cost} {settings.AGENT_CURRENCY})" if cost is not None else "")

    @admin.display(description="duration")
    def duration(self, run: Run) -> str:
        """From creation to the last change (for a run not done yet: so far)."""
        if run.created_at is None:
            return "—"
        return f"{(run.updated_at - run.created_at).total_seconds():.2f} s"

    def get_search_results(self, request, queryset, search_term):
        """The search box: the input, the id or the owner's name as before, and the words of input and output as the
        API's `?q=` finds them (full-text, indexed)."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term and re.search(search.Q_PATTERN, search_term) and len(search_term) <= search.MAX_Q_CHARS:
            found = found | search.RunSearch(q=search_term).apply(queryset)
        return found, duplicates

    def has_review_permission(self, request: HttpRequest) -> bool:
        return can_review(request.user)

    @admin.action(description="Cancel selected runs", permissions=["review"])  # a write: not for view-only staff
    def cancel_runs(self, request: HttpRequest, queryset) -> None:
        cancelled = 0
        for run in queryset.exclude(status=RunStatus.DONE):
            try:
                drive.cancel_run(run_id=run.pk, actor=request.user)
                cancelled += 1
            except errors.RunFinished:
                pass
        self.message_user(request, f"Cancelled {cancelled} run(s).", messages.SUCCESS)

    def get_urls(self):
        decide = self.admin_site.admin_view(self.decide_view)
        rerun = self.admin_site.admin_view(self.fork_view)
        return [
            path("<uuid:run_id>/decide/", decide, name="agents_run_decide"),
            path("<uuid:run_id>/fork/", rerun, name="agents_run_fork"),
            *super().get_urls(),
        ]

    def get_object(self, request, object_id, from_field=None):
        run = super().get_object(request, object_id, from_field)
        if run is not None:  # for thread_link, which is not given the request
            run.thread_url = self._thread_url(request, run)
        return run

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, unquote(object_id))
        if run is None:  # unknown or malformed id: the admin's own "doesn't exist" redirect, not a 500
            return super().change_view(request, object_id, form_url, extra_context)
        steps = list(Step.objects.filter(run=run).order_by("index"))
        run.paused_steps = steps  # the selector reads the steps loaded here: no second query
        context = {
            "run": run,
            "input_images": input_images(run),
            **_pending_context(request, run),
            "steps": _step_views(run, steps),
            "decide_url": reverse("admin:agents_run_decide", args=[run.pk]),
            "live_events_url": _live_events_url(request, run),
            "last_step": steps[-1].index if steps else -1,
            "run_cost": cost_text(run.cost_nanos),
            "currency": settings.AGENT_CURRENCY,
            "fork_url": reverse("admin:agents_run_fork", args=[run.pk]),
            "may_fork": may_fork(request, run),
            **_tree_context(run),
        }
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **context})

    def fork_view(self, request: HttpRequest, run_id):
        """Re-run from here: a fork of the run after the posted step, in the background, as the API's fork does;
        the page of the new run follows it live."""
        run = get_object_or_404(Run, pk=run_id)
        back = HttpResponseRedirect(reverse("admin:agents_run_change", args=[run.pk]))
        if request.method != "POST":
            return back
        if not may_fork(request, run):
            raise PermissionDenied
        try:
            new = fork.fork_run(
                run_id=run.pk,
                actor=request.user,
                from_step=int(request.POST.get("from_step", "")),
                overrides={"mode": "background"},
            )
        except ValueError:
            self.message_user(request, "Choose a step to re-run from.", messages.ERROR)
            return back
        except errors.ServiceError as exc:
            self.message_user(request, _detail_text(exc.detail), messages.ERROR)
            return back
        self.message_user(request, f"Re-running from step {new.forked_from_step} as a new run.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:agents_run_change", args=[new.pk]))

    def _thread_url(self, request: HttpRequest, run: Run) -> str:
        """The page of the run's thread when this user may open it, else empty."""
        thread = run.thread
        if thread is None:
            return ""
        threads = self.admin_site._registry.get(Thread)
        may_open = threads is not None and threads.has_view_permission(request, thread)
        return reverse("admin:agents_thread_change", args=[thread.pk]) if may_open else ""

    def decide_view(self, request: HttpRequest, run_id):
        """Decide waiting calls through the same service as the API: every call of the reply at once
        (`decide=all`), one call (`decide=<n>:approve|deny`), or the first call (`decision=approve|deny`)."""
        run = get_object_or_404(Run, pk=run_id)
        back = HttpResponseRedirect(reverse("admin:agents_run_change", args=[run.pk]))
        if request.method != "POST":
            return back
        if not can_decide(request.user, run):
            raise PermissionDenied
        try:
            run, decided = self._decide(request, run)
        except ValueError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return back
        except errors.ServiceError as exc:
            self.message_user(request, _detail_text(exc.detail), messages.ERROR)
            return back
        what = "Decision recorded" if decided == 1 else f"{decided} decisions recorded"
        self.message_user(request, f"{what}; the run is now {run.status}.", messages.SUCCESS)
        return back

    def _decide(self, request: HttpRequest, run: Run) -> tuple[Run, int]:
        """Record the posted decisions (all or nothing, the service validates them) and drive the run on."""
        post = request.POST
        if "decide" not in post:  # the single form: the first waiting call
            run = review.decide_approval(
                run_id=run.pk,
                actor=request.user,
                approved=post.get("decision") == "approve",
                arguments=_edited_arguments(post.get("arguments", "")),
                reason=post.get("reason") or None,
                continue_run=True,
            )
            return run, 1
        decisions = _posted_decisions(post)
        run = review.decide_approval(run_id=run.pk, actor=request.user, decisions=decisions, continue_run=True)
        return run, len(decisions)


def may_fork(request: HttpRequest, run: Run) -> bool:
    """Whether this user may re-run the run from a step: the API's rule (who may see the run through it)."""
    return can_review(request.user) or run.owner_id == request.user.pk


def _tree_context(run: Run) -> dict:
    """The run's place in a tree: its parent, its children (a sub-agent's runs), the run it was forked from."""
    children = list(Run.objects.filter(parent_id=run.pk).order_by("created_at")) if run.subagents else []
    return {
        "parent_url": reverse("admin:agents_run_change", args=[run.parent_id]) if run.parent_id else "",
        "forked_from_url": (
            reverse("admin:agents_run_change", args=[run.forked_from_run]) if run.forked_from_run else ""
        ),
        "children": [{"run": child, "url": reverse("admin:agents_run_change", args=[child.pk])} for child in children],
    }


def _live_events_url(request: HttpRequest, run: Run) -> str:
    """The run's event stream, which the page of an unfinished run follows; empty when the run is done or the API
    would not show this user the run (view-only staff see other people's runs here, not there)."""
    visible = can_review(request.user) or run.owner_id == request.user.pk  # the rule of permissions.visible_runs
    if run.status == RunStatus.DONE or not visible:
        return ""
    return reverse("run-events", args=[run.pk])


def _pending_context(request: HttpRequest, run: Run) -> dict:
    """What the run page shows of the calls waiting for a decision, each with its own controls."""
    calls = selectors.pending_actions(run)
    expires_at = run.approval_expires_at if calls else None
    expired = expires_at is not None and expires_at <= timezone.now()
    may_decide = bool(calls) and can_decide(request.user, run)
    return {
        "pending_calls": [
            {"n": n, "call_id": c["call_id"], "tool": c["tool"], "arguments_json": json.dumps(c["arguments"], indent=2)}
            for n, c in enumerate(calls, 1)
        ],
        "pending_tools": ", ".join(c["tool"] for c in calls),
        "expires_at": expires_at,
        "expired": expired,
        "may_decide": may_decide,
        "can_decide": may_decide and not expired,  # an expired call is the system's to deny: no controls
    }


def _posted_decisions(post: QueryDict) -> list[dict]:
    """The run page's decisions in call order: every call shown (`decide=all`, each with its approve/deny choice) or
    the one call named by `decide=<n>:approve|deny`. Calls are posted by id, so a page gone stale never decides a
    different call than the one the reviewer saw."""
    calls = {int(k[5:]): post[k] for k in post if k.startswith("call-") and k[5:].isdigit()}
    target = post.get("decide", "")
    if target == "all" and calls:
        chosen = {n: post.get(f"choice-{n}", "") for n in calls}
        missing = [str(n) for n in sorted(chosen) if chosen[n] not in ("approve", "deny")]
        if missing:
            raise ValueError(f"Choose approve or deny for every call (none chosen for call {', '.join(missing)}).")
    else:
        position, _, verdict = target.partition(":")
        if not position.isdigit() or int(position) not in calls or verdict not in ("approve", "deny"):
            raise ValueError("Unknown decision: reload the page and try again.")
        chosen = {int(position): verdict}
    return [_posted_decision(post, n, calls[n], chosen[n] == "approve") for n in sorted(chosen)]


def _posted_decision(post: QueryDict, n: int, call_id: str, approved: bool) -> dict:
    # Edits are read for a denial too (as the single form does): unreadable JSON is an error, never silently dropped.
    arguments = _edited_arguments(post.get(f"arguments-{n}", ""), call=n)
    decision = {"call_id": call_id, "approved": approved, "reason": post.get(f"reason-{n}", "").strip() or None}
    return decision if arguments is None else {**decision, "arguments": arguments}


def _detail_text(detail) -> str:
    """A service error's detail as one line: field errors read as their messages."""
    if isinstance(detail, dict):
        return " ".join(str(m) for messages_ in detail.values() for m in messages_)
    return str(detail)


def _edited_arguments(raw: str, call: int | None = None) -> object:
    """The reviewer's edited arguments: empty means 'as the model asked'; else JSON (the service checks the schema)."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        where = "" if call is None else f" of call {call}"
        raise ValueError(f"The edited arguments{where} are not valid JSON.") from None


LONG_OUTPUT_CHARS = 400


def input_images(run: Run) -> list[dict]:
    """The images of a run's input for its page: base64 ones as data: URLs (their type was checked against their
    bytes, and is never SVG), URL ones as links only (the page fetches nothing from elsewhere)."""
    shown = []
    for n, image in enumerate(parts.images(run.input_parts), 1):
        if image.get("url"):
            shown.append({"n": n, "url": image["url"]})
        else:
            size = parts.decoded_size(image["data"])
            src = f"data:{image['media_type']};base64,{image['data']}"
            shown.append({"n": n, "src": src, "label": f"{image['media_type']}, {filesizeformat(size)}"})
    return shown


def _step_views(run: Run, steps: list[Step]) -> list[dict]:
    """The trace: each step's view; an error step that sent the model a retry prompt shows that prompt."""
    views, previous = [], None
    for step in steps:
        view = _step_view(step)
        if step.kind == StepKind.ERROR:
            current = {"kind": step.kind, **step.data}
            view["retry_prompt"] = prompts.retry_prompt(run.protocol, current, previous, run.output_schema)
        previous = {"kind": step.kind, **step.data}
        views.append(view)
    return views


def _step_view(step: Step) -> dict:
    """What the trace template shows of a step (plain data: the template escapes everything)."""
    data = dict(step.data)
    view = {
        "index": step.index,
        "kind": step.kind,
        "latency_ms": step.latency_ms,
        "created_at": step.created_at,
        **data,
    }
    view["cost"] = cost_text(data.get("cost_nanos"))
    for key in ("arguments", "original_arguments", "usage"):
        if key in data:
            view[f"{key}_json"] = json.dumps(data[key], indent=2)
    if step.kind == StepKind.APPROVAL:  # the arguments once, unless the reviewer edited them
        view["edited"] = bool(data.get("approved")) and data.get("arguments") != data.get("original_arguments")
    view["tool_calls_json"] = [
        {"name": c["name"], "id": c["id"], "arguments": json.dumps(c["arguments"])}
        for c in data.get("tool_calls") or []
    ]
    output = data.get("output") if step.kind == StepKind.TOOL else None  # an error step's "output" is a flag
    output = output if isinstance(output, str) else ""
    view["long_output"] = len(output) > LONG_OUTPUT_CHARS
    view["output_head"] = output[:LONG_OUTPUT_CHARS]
    if step.kind == StepKind.MODEL and ("finish" in data or "thinking" in data or "blocks" in data):
        view |= _unusual_reply_view(data)
    return view


FINISH_LABELS = {
    "output_truncated": "output truncated: the reply reached the output token limit; its tool calls were not run",
    "content_filtered": "content filtered: the provider's content filter stopped the reply",
    "pause_turn": "paused: the provider paused a long turn; the next call continues it",
}


def _unusual_reply_view(data: dict) -> dict:
    """A model reply's way of ending when unusual (`finish_label`; a refusal with its text) and the model's own
    thinking (`thinking`, shown folded; `redacted_thinking`: how many blocks the provider sent encrypted)."""
    finish = data.get("finish")
    view: dict = {"finish_ends_run": finish in ("output_truncated", "content_filtered", "refused")}
    if finish == "refused":
        view["finish_label"] = f"refused: {(data.get('text') or '').strip() or '(no reason given)'}"
    elif finish:
        view["finish_label"] = FINISH_LABELS.get(finish, finish.replace("_", " "))
    blocks = data.get("blocks") or []
    view["redacted_thinking"] = sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "redacted_thinking")
    view["thinking"] = data.get("thought") if data.get("thinking") else None
    return view


from agents.evals import admin as _evals_admin  # noqa: E402, F401  (registers the eval admin)

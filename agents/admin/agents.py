"""The console's Agents page: staff create and edit named configurations; a form refuses anything a run would
refuse (provider and model allowlists, tool names, limits, a broken output schema) before it is saved. The admin's
own history (LogEntry) records who changed which fields; `updated_by` shows the last one on the list.

Every field shows empty when it is empty: the provider and protocol are choices whose first option is the default,
tools are checkboxes (none checked: every enabled tool), and the output schema is JSON text, blank for none."""

from __future__ import annotations

import difflib
import json

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from agents import providers
from agents.catalog import services as catalog
from agents.errors import InvalidRequest
from agents.models import Agent, AgentVersion
from agents.runconfig.options import AGENT_OPTIONS
from agents.runs import runtime


class DeferredChoiceField(forms.ChoiceField):
    """A choice whose value the form's clean() judges as a run would (agent_problems), so a stale or forged value
    gets the run's own message ("Provider 'x' is not allowed here. Allowed: …") rather than a generic one."""

    def valid_value(self, value) -> bool:
        return True


class ToolChoiceField(forms.MultipleChoiceField):
    """Tool names as checkboxes; nothing checked is `empty` (None: every enabled tool; []: none added)."""

    widget = forms.CheckboxSelectMultiple

    def __init__(self, *, empty: list[str] | None, **kwargs) -> None:
        self.empty = empty
        super().__init__(required=False, **kwargs)

    def valid_value(self, value) -> bool:
        return True  # an unknown name is refused by clean() with the known ones listed, as a run refuses it

    def clean(self, value):
        names = [name for name in super().clean(value) if name]
        return names or self.empty


class OptionalJSONField(forms.JSONField):
    """JSON text where nothing (null) shows as an empty box, not as `null`."""

    def prepare_value(self, value):
        return "" if value is None else super().prepare_value(value)


class AgentForm(forms.ModelForm):
    provider = DeferredChoiceField(required=False)
    protocol = forms.ChoiceField(required=False)
    tools = ToolChoiceField(empty=None, help_text="none checked: every enabled tool")
    sensitive_tools = ToolChoiceField(
        empty=[], help_text="these ask a reviewer before they run, besides those that always do"
    )
    agents = ToolChoiceField(
        empty=None, help_text="agents it may hand a task to: each is a tool agent_<name> whose call is a child run"
    )
    output_schema = OptionalJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80, "placeholder": '{"type": "object", "properties": {…}}'}),
        help_text="a JSON Schema the final answer must satisfy; empty: a free-text answer",
    )
    tool_limits = OptionalJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80, "placeholder": '{"search": 3}'}),
        help_text="calls per tool; a call past it is answered 'exhausted' and the model goes on (docs/limits.md)",
    )
    guardrails = OptionalJSONField(
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 6, "cols": 80, "placeholder": '[{"type": "pii"}, {"type": "max_length", "chars": 2000}]'}
        ),
        help_text="checks of the input, the final answer and tool calls, in order (docs/guardrails.md)",
    )
    fallback_models = OptionalJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80, "placeholder": '["anthropic/claude-3-5-haiku-latest"]'}),
        help_text='"provider/model" tried in order when its model fails or is rate-limited (docs/fallback-models.md)',
    )

    evaluators = OptionalJSONField(
        required=False,
        widget=forms.Textarea(
            attrs={
                "rows": 4,
                "cols": 80,
                "placeholder": '[{"name": "helpful", "sample": 0.1, "check": {"type": "judge", "rubric": "…"}}]',
            }
        ),  # fmt: skip
        help_text="online evaluators: each scores a sampled fraction of its finished runs (docs/evals.md)",
    )

    class Meta:
        model = Agent
        fields = ["name", "description", *AGENT_OPTIONS, "evaluators"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        stored = self.instance
        self.fields["provider"].choices = _provider_choices(stored.provider)
        self.fields["protocol"].choices = [("", f"default ({settings.AGENT_DEFAULT_PROTOCOL})"), *_PROTOCOLS]
        tools, floor = runtime.tool_registry().select(), runtime.sensitive_floor()
        known = list(tools)
        always = {name for name, tool in tools.items() if runtime.is_sensitive(tool, floor)}
        for name in ("tools", "sensitive_tools"):
            gone = [n for n in getattr(stored, name) or [] if n not in known]  # an MCP server's tool, now away
            labels = [(n, f"{n} (always asks)" if name == "sensitive_tools" and n in always else n) for n in known]
            self.fields[name].choices = labels + [(n, f"{n} (not available now)") for n in gone]
        others = list(Agent.objects.exclude(pk=stored.pk).order_by("name").values_list("name", flat=True))
        self.fields["agents"].choices = [(n, n) for n in others]
        self.fields["model"].widget.attrs["placeholder"] = "the provider's default"
        if not stored.evaluators:  # none: an empty box, not "[]"
            self.initial["evaluators"] = None

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        name = data.get("name") or self.instance.name
        for field, found in catalog.problems(data, name).items():  # the API's check: the run configuration's
            self.add_error(field if field in self.fields else None, found)
        if data.get("evaluators") is None:
            data["evaluators"] = []
        return data


_PROTOCOLS = [("tools", "tools (the provider's function calling)"), ("react", "react (the text format)")]


def _provider_choices(stored: str) -> list[tuple[str, str]]:
    """The default, then the providers a run can use here now; an agent's provider that no longer is stays listed,
    marked, so opening the agent does not change it."""
    usable = providers.usable()
    choices = [("", f"default ({settings.AGENT_DEFAULT_PROVIDER})"), *((name, name) for name in usable)]
    if stored and stored not in usable:
        choices.append((stored, f"{stored} (not usable here now)"))
    return choices


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = [
        "name", "version", "provider_model", "protocol_name", "tools_summary", "answer", "updated_at", "updated_by",
    ]  # fmt: skip
    search_fields = ["name", "instructions"]
    readonly_fields = ["version_history", "created_at", "updated_at", "updated_by"]

    def get_readonly_fields(self, request, obj=None):
        # A name is how runs and versions name it (`name@n`): it is set once; a new name is a new agent.
        return ["name", *self.readonly_fields] if obj is not None else self.readonly_fields

    @admin.display(description="versions")
    def version_history(self, agent: Agent) -> str:
        if agent.pk is None:
            return "-"
        url = reverse("admin:agents_agent_versions", args=[agent.pk])
        return format_html('version {} · <a href="{}">history, diff and restore</a>', agent.version, url)

    @admin.display(description="provider / model")
    def provider_model(self, agent: Agent) -> str:
        return f"{agent.provider or 'default'} / {agent.model or 'default'}"

    @admin.display(description="protocol", ordering="protocol")
    def protocol_name(self, agent: Agent) -> str:
        return agent.protocol or "default"

    @admin.display(description="tools")
    def tools_summary(self, agent: Agent) -> str:
        return ", ".join(agent.tools) if agent.tools else "all"

    @admin.display(description="answer")
    def answer(self, agent: Agent) -> str:
        """What the agent answers: free text, or JSON checked against its output schema (words, not a ✔/✖ icon: a
        red ✖ on a new agent read as an error)."""
        return "free text" if agent.output_schema is None else "JSON (output schema)"

    def save_model(self, request, obj: Agent, form, change: bool) -> None:
        """Saved with its new version in one transaction (agents.catalog): a form that changed nothing makes none."""
        if change and not form.has_changed():
            return
        obj.updated_by = request.user
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            catalog.record(obj, request.user)

    def get_urls(self):
        versions = self.admin_site.admin_view(self.versions_view)
        return [
            path("<path:object_id>/versions/", versions, name="agents_agent_versions"),
            *super().get_urls(),
        ]

    def versions_view(self, request, object_id: str):
        """The agent's versions, newest first; a diff of any two (`?a=&b=`, by default the last two); restoring one
        (POST) makes a new version equal to it."""
        agent = self.get_object(request, object_id)
        if agent is None or not self.has_view_permission(request, agent):
            raise Http404
        if request.method == "POST":
            if not self.has_change_permission(request, agent):
                raise PermissionDenied
            number = request.POST.get("restore", "")
            if not number.isdigit():
                return HttpResponseBadRequest("Choose a version to restore.")
            try:
                version = catalog.restore(agent.name, int(number), request.user)
            except Agent.DoesNotExist:
                raise Http404 from None
            except InvalidRequest as exc:
                messages.error(request, f"Version {number} cannot be restored as it is: {exc.detail}")
            else:
                messages.success(request, f"Restored version {number} as version {version.version}.")
            return redirect(request.path)
        history = list(catalog.versions(agent.name))
        numbers = [v.version for v in history]
        a, b = _pair(request.GET, numbers)
        by_number = {v.version: v for v in history}
        context = {
            **self.admin_site.each_context(request),
            "title": f"Versions of {agent.name}",
            "opts": self.model._meta,
            "original": agent,
            "history": history,
            "a": a,
            "b": b,
            "diff": _diff(by_number.get(a), by_number.get(b)),
            "can_restore": self.has_change_permission(request, agent),
        }
        return TemplateResponse(request, "admin/agents/agent/versions.html", context)


def _pair(query, numbers: list[int]) -> tuple[int | None, int | None]:
    """The two versions to compare: ?a= and ?b= when both are versions, else the one before the newest and it."""
    try:
        a, b = int(query.get("a", "")), int(query.get("b", ""))
    except ValueError:
        a = b = 0
    if a in numbers and b in numbers:
        return a, b
    if len(numbers) >= 2:
        return numbers[1], numbers[0]
    return (numbers[0], numbers[0]) if numbers else (None, None)


def _diff(old: AgentVersion | None, new: AgentVersion | None) -> list[tuple[str, str]]:
    """A unified diff of two versions' configurations, one JSON key a line: (css class, line)."""
    if old is None or new is None:
        return []
    lines = difflib.unified_diff(
        _lines(old.config), _lines(new.config), f"version {old.version}", f"version {new.version}", lineterm=""
    )
    kinds = {"+": "added", "-": "removed", "@": "hunk"}
    return [("hunk" if line[:3] in ("---", "+++") else kinds.get(line[:1], ""), line) for line in lines]


def _lines(config: dict) -> list[str]:
    return [f"{key}: {json.dumps(config.get(key), sort_keys=True)}" for key in catalog.FIELDS]

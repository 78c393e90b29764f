"""The console's Agents page: staff create and edit named configurations; a form refuses anything a run would
refuse (provider and model allowlists, tool names, limits, a broken output schema) before it is saved. The admin's
own history (LogEntry) records who changed which fields; `updated_by` shows the last one on the list.

Every field shows empty when it is empty: the provider and protocol are choices whose first option is the default,
tools are checkboxes (none checked: every enabled tool), and the output schema is JSON text, blank for none."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin

from agents import providers
from agents.evals import online
from agents.models import Agent
from agents.runconfig.options import AGENT_OPTIONS
from agents.runs import agent_config, runtime


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
        candidate = Agent(**{name: data.get(name) for name in self.Meta.fields})
        for field, messages in agent_config.agent_problems(candidate).items():
            self.add_error(field if field in self.fields else None, messages)
        for message in online.evaluator_problems(data.get("evaluators")):
            self.add_error("evaluators", message)
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
    list_display = ["name", "provider_model", "protocol_name", "tools_summary", "answer", "updated_at", "updated_by"]
    search_fields = ["name", "instructions"]
    readonly_fields = ["created_at", "updated_at", "updated_by"]

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
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)

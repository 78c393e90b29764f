"""The console's Agents page: staff create and edit named configurations; a form refuses anything a run would
refuse (provider and model allowlists, tool names, limits, a broken output schema) before it is saved. The admin's
own history (LogEntry) records who changed which fields; `updated_by` shows the last one on the list."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from agents.models import Agent
from agents.runs import submit


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = [
            "name", "instructions", "provider", "model", "protocol", "tools", "sensitive_tools", "max_turns",
            "timeout_s", "temperature", "max_output_tokens", "output_schema",
        ]  # fmt: skip
        widgets = {"output_schema": forms.Textarea(attrs={"rows": 6, "cols": 80})}

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        candidate = Agent(**{name: data.get(name) for name in self.Meta.fields})
        for field, messages in submit.agent_problems(candidate).items():
            self.add_error(field if field in self.fields else None, messages)
        return data


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = ["name", "provider_model", "protocol", "tools_summary", "structured", "updated_at", "updated_by"]
    search_fields = ["name", "instructions"]
    readonly_fields = ["created_at", "updated_at", "updated_by"]

    @admin.display(description="provider / model")
    def provider_model(self, agent: Agent) -> str:
        return f"{agent.provider or 'default'} / {agent.model or 'default'}"

    @admin.display(description="tools")
    def tools_summary(self, agent: Agent) -> str:
        return ", ".join(agent.tools) if agent.tools else "all"

    @admin.display(description="output schema", boolean=True)
    def structured(self, agent: Agent) -> bool:
        return agent.output_schema is not None

    def save_model(self, request, obj: Agent, form, change: bool) -> None:
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)

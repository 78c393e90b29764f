"""Run and step shapes of API.md. Serializers validate and shape; they hold no business logic."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents import runtime
from agents.models import Run, RunMode, RunProtocol, Step

STEP_FIELDS = {
    "model": ("thought", "text", "tool_calls", "final_answer", "usage"),
    "tool": ("call_id", "name", "arguments", "output", "is_error"),
    "approval": ("call_id", "name", "original_arguments", "arguments", "approved", "reviewer", "reason"),
    "error": ("message",),
}


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = Step
        fields = ["index", "kind", "created_at", "latency_ms"]

    def to_representation(self, instance: Step) -> dict:
        data = super().to_representation(instance)
        for name in STEP_FIELDS.get(instance.kind, ()):
            data[name] = instance.data.get(name)
        if instance.data.get("reflection"):
            data["reflection"] = True  # a critique between attempts (max_reflections)
        return data


class RunSerializer(serializers.ModelSerializer):
    ok = serializers.BooleanField(read_only=True)
    usage = serializers.SerializerMethodField()
    pending_action = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id", "status", "stop_reason", "ok", "output", "turns", "input", "mode", "protocol", "provider",
            "model", "max_turns", "max_reflections", "timeout_s", "tools", "sensitive_tools", "pending_action",
            "error", "usage", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(
        {
            "type": "object",
            "properties": {k: {"type": "integer"} for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
        }
    )
    def get_usage(self, run: Run) -> dict:
        return {
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "total_tokens": run.total_tokens,
        }

    def to_representation(self, instance: Run) -> dict:
        data = super().to_representation(instance)
        if not instance.max_reflections:
            data.pop("max_reflections")  # shown only when used: the run object of API.md stays exactly as it was
        return data

    @extend_schema_field({"type": "object", "nullable": True})
    def get_pending_action(self, run: Run) -> dict | None:
        return runtime.pending_action(run)


class RunDetailSerializer(RunSerializer):
    steps = StepSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "steps"]
        read_only_fields = fields


class RunCreateSerializer(serializers.Serializer):
    input = serializers.CharField(min_length=1, trim_whitespace=False)
    mode = serializers.ChoiceField(choices=RunMode.choices, default=RunMode.SYNC)
    protocol = serializers.ChoiceField(choices=RunProtocol.choices, required=False)
    provider = serializers.CharField(max_length=32, required=False)
    model = serializers.CharField(max_length=200, required=False)
    max_turns = serializers.IntegerField(min_value=1, max_value=50, default=8)
    max_reflections = serializers.IntegerField(min_value=0, max_value=5, default=0)
    timeout_s = serializers.FloatField(min_value=1, max_value=600, default=60.0)
    tools = serializers.ListField(child=serializers.CharField(max_length=64), max_length=64, required=False)
    sensitive_tools = serializers.ListField(child=serializers.CharField(max_length=64), max_length=64, default=list)

    def validate_input(self, value: str) -> str:
        limit = settings.AGENT_MAX_INPUT_CHARS
        if len(value) > limit:
            raise serializers.ValidationError(f"Ensure this field has no more than {limit} characters.")
        if not value.strip():
            raise serializers.ValidationError("This field may not be blank.")
        return value


class ToolSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField()
    sensitive = serializers.BooleanField()


class ToolInvokeSerializer(serializers.Serializer):
    arguments = serializers.DictField(default=dict)


class ToolResultSerializer(serializers.Serializer):
    name = serializers.CharField()
    output = serializers.CharField()
    is_error = serializers.BooleanField()


class SeedRunSerializer(serializers.Serializer):
    input = serializers.CharField()
    max_turns = serializers.IntegerField(required=False)
    timeout_s = serializers.FloatField(required=False)


class SeedRunResultSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    output = serializers.CharField(allow_null=True)
    stop_reason = serializers.CharField(allow_null=True)
    turns = serializers.IntegerField()
    ok = serializers.BooleanField()

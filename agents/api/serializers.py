"""Run and step shapes of docs/api.md. Serializers validate and shape; they hold no business logic. Their field
types, and the run options' fields made from the run configuration's option list, are agents/api/fields.py's."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

import agents.api.schema  # noqa: F401  (registers the schema extensions for the serializers below)
import agents.api.schema_steps  # noqa: F401  (registers the step union)
from agents.api.bodies import BodySerializer
from agents.api.fields import (
    OPTION_FIELDS,
    MetadataField,
    NulFreeDictField,
    QueryChoiceField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
    StrictIntegerField,
    StrictUUIDField,
    option_field,
    shallow,
    with_input_limit,
)
from agents.engine import parts
from agents.models import Run, RunMode, ScoreSource, Step, Thread
from agents.runconfig.options import BY_NAME, FORK_OPTIONS, HistoryMode
from agents.runs import representation
from agents.runs.agent_config import REF_MAX_LENGTH
from agents.runs.options import MULTITASK_STRATEGIES
from agents.runs.representation import USAGE_KEYS
from agents.usage.prices import cost_text

PENDING_ACTION_SCHEMA = {
    "type": "object",
    "nullable": True,
    "description": "The (first) call waiting for a decision while the run is `awaiting_approval`, else null.",
    "properties": {
        "call_id": {"type": "string"},
        "tool": {"type": "string"},
        "arguments": {"type": "object", "additionalProperties": {}},
        "expires_at": {
            "type": "string",
            "format": "date-time",
            "nullable": True,
            "description": "When the system denies the call if no one has decided (reason `expired`).",
        },
        "run": {
            "type": "string",
            "format": "uuid",
            "description": "Present when the call is a child run's (a sub-agent's): that run's id. A decision sent to "
            "this run is the child's.",
        },
    },
    "required": ["call_id", "tool", "arguments", "expires_at"],
}


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = Step
        fields = ["index", "kind", "created_at", "latency_ms"]

    def to_representation(self, instance: Step) -> dict:
        return representation.step_json(instance)


RUN_LINK_SCHEMA = {
    "type": "object",
    "nullable": True,
    "properties": {"run": {"type": "string", "format": "uuid"}, "step": {"type": "integer", "nullable": True}},
    "required": ["run", "step"],
}


class RunSerializer(serializers.ModelSerializer):
    ok = serializers.BooleanField(read_only=True)
    thread_id = serializers.UUIDField(read_only=True, allow_null=True, help_text="The run's thread, or null.")
    agent = serializers.CharField(read_only=True, allow_null=True, help_text="The agent it started from, or null.")
    output_json = serializers.JSONField(read_only=True, allow_null=True, help_text="The parsed structured answer.")
    usage = serializers.SerializerMethodField()
    pending_action = serializers.SerializerMethodField()
    pending_actions = serializers.SerializerMethodField()
    parent = serializers.SerializerMethodField()
    forked_from = serializers.SerializerMethodField()
    metadata = MetadataField(read_only=True)
    cost = serializers.SerializerMethodField()
    max_total_tokens = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Tokens its model calls may use in all (null: no limit)."
    )
    max_tool_calls = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Tool calls it may make (null: no limit)."
    )
    tool_limits = serializers.DictField(
        child=serializers.IntegerField(), read_only=True, help_text="Calls it may make per tool."
    )
    guardrails = serializers.ListField(
        child=serializers.DictField(), read_only=True, help_text="The guardrails it runs with (docs/guardrails.md)."
    )
    fallback_models = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text='"provider/model" tried in order when its model fails.'
    )
    agent_version = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="The version of its agent it ran (`agent@n`); null without one."
    )
    prompt_cache = serializers.BooleanField(
        read_only=True, help_text="Whether its stable prefix was marked for caching."
    )
    history = serializers.ChoiceField(
        source="history_mode", choices=HistoryMode.choices, read_only=True,
        help_text="What its thread's turns past the history budget became: truncate or summarize.",
    )  # fmt: skip

    class Meta:
        model = Run
        fields = [
            "id", "status", "stop_reason", "ok", "output", "output_json", "turns", "input", "thread_id", "agent",
            "agent_version", "mode", "protocol", "provider", "model", "max_turns", "max_reflections", "timeout_s",
            "tools", "sensitive_tools", "pending_action", "pending_actions", "error", "usage", "cost",
            "max_total_tokens", "max_tool_calls", "tool_limits", "guardrails", "fallback_models", "prompt_cache",
            "history", "metadata", "parent",
            "forked_from", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field({**RUN_LINK_SCHEMA, "description": "A child run's parent run and the step that called it."})
    def get_parent(self, run: Run) -> dict | None:
        return representation.parent_json(run)

    @extend_schema_field({**RUN_LINK_SCHEMA, "description": "A fork's original run and the step it started after."})
    def get_forked_from(self, run: Run) -> dict | None:
        return representation.forked_from_json(run)

    @extend_schema_field(
        {
            "type": "object",
            "properties": {k: {"type": "integer"} for k in USAGE_KEYS},
            "required": list(USAGE_KEYS),
        }
    )
    def get_usage(self, run: Run) -> dict:
        return representation.usage_json(run)

    @extend_schema_field(
        {
            "type": "string",
            "nullable": True,
            "pattern": r"^[0-9]+(\.[0-9]+)?$",
            "description": "What its model calls cost, a decimal string in the deployment's currency (AGENT_CURRENCY, "
            "default USD); null while no call had a known price.",
        }
    )
    def get_cost(self, run: Run) -> str | None:
        return cost_text(run.cost_nanos)

    def to_representation(self, instance: Run) -> dict:
        return representation.run_json(instance)

    @extend_schema_field(PENDING_ACTION_SCHEMA)
    def get_pending_action(self, run: Run) -> dict | None:
        actions = self.get_pending_actions(run)
        return actions[0] if actions else None

    @extend_schema_field({"type": "array", "items": {**PENDING_ACTION_SCHEMA, "nullable": False}})
    def get_pending_actions(self, run: Run) -> list[dict]:
        return representation.pending_actions_json(run)


class ScoreSerializer(serializers.Serializer):
    """A score on a run (docs/evals.md#scores-on-production-runs)."""

    name = serializers.CharField()
    score = serializers.FloatField(min_value=0, max_value=1)
    passed = serializers.BooleanField(allow_null=True, help_text="An evaluator's pass or fail; null for feedback.")
    reason = serializers.CharField(allow_blank=True)
    comment = serializers.CharField(allow_blank=True)
    source = serializers.ChoiceField(choices=ScoreSource.choices)
    created_at = serializers.DateTimeField()


class FeedbackSerializer(BodySerializer):
    score = StrictFloatField(min_value=0, max_value=1, help_text="From 0 (bad) to 1 (good).")
    name = StrictCharField(max_length=64, required=False, default="feedback", help_text="What is scored.")
    comment = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")


class RunDetailSerializer(RunSerializer):
    steps = StepSerializer(many=True, read_only=True)
    children = serializers.ListField(
        child=serializers.UUIDField(), read_only=True, help_text="The child runs its sub-agent calls started, in order."
    )
    scores = ScoreSerializer(
        many=True, read_only=True, help_text="Its online evaluators' scores and people's feedback, oldest first."
    )

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "children", "steps", "scores"]
        read_only_fields = fields

    def to_representation(self, instance: Run) -> dict:
        return representation.run_detail_json(instance)


class RunCreateSerializer(BodySerializer):
    input = StrictCharField(min_length=1)
    mode = StrictChoiceField(choices=RunMode.choices, default=RunMode.SYNC)
    agent = StrictCharField(
        max_length=REF_MAX_LENGTH,
        required=False,
        help_text="Start from this agent's configuration: `name`, or `name@n` for its version n.",
    )
    thread_id = StrictUUIDField(required=False, help_text="Continue this thread (one of yours): its runs come first.")
    metadata = MetadataField(required=False)
    multitask_strategy = StrictChoiceField(
        choices=[(s, s) for s in MULTITASK_STRATEGIES],
        default="reject",
        help_text="With thread_id, when the thread has a run in progress: reject it (409), enqueue this run after it, "
        "interrupt it (cancelled, its steps kept for this run to see), or rollback (cancelled and deleted).",
    )

    def validate(self, data: dict) -> dict:
        return with_input_parts(data)

    def get_fields(self) -> dict:
        # Shallow copies: DRF deep-copies every declared field per instance (re-running each field's __init__),
        # a cost on every create; binding a copy never touches the declared field, and these fields keep no state.
        return with_input_limit({name: shallow(field) for name, field in self._declared_fields.items()})


# The options come after `input` and `mode`, in the list's order, then the request's other fields.
_declared = RunCreateSerializer._declared_fields
RunCreateSerializer._declared_fields = {
    "input": _declared.pop("input"),
    "mode": _declared.pop("mode"),
    **OPTION_FIELDS,
    **_declared,
}


def with_input_parts(data: dict) -> dict:
    """A list input as the services take it: `input_parts` as given, `input` their text (lists, search, titles)."""
    value = data.get("input")
    if type(value) is list:
        data["input_parts"], data["input"] = value, parts.text_of(value)
    return data


class ThreadSerializer(serializers.ModelSerializer):
    run_count = serializers.IntegerField(read_only=True)
    metadata = MetadataField(read_only=True)

    class Meta:
        model = Thread
        fields = ["id", "title", "metadata", "created_at", "updated_at", "run_count"]
        read_only_fields = fields


class ThreadRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = Run
        fields = ["id", "input", "output", "status", "stop_reason", "created_at"]
        read_only_fields = fields

    def to_representation(self, instance: Run) -> dict:
        return {**super().to_representation(instance), "input": representation.run_input(instance)}


class ThreadDetailSerializer(ThreadSerializer):
    runs = ThreadRunSerializer(many=True, read_only=True, help_text="The thread's runs, oldest first.")
    summary = serializers.CharField(
        read_only=True,
        help_text='Its earliest runs condensed by the model (runs with history "summarize"); "" while there is none.',
    )
    summary_runs = serializers.IntegerField(
        read_only=True, min_value=0, help_text="How many of its runs, oldest first, the summary covers."
    )

    class Meta(ThreadSerializer.Meta):
        fields = [*ThreadSerializer.Meta.fields, "summary", "summary_runs", "runs"]
        read_only_fields = fields


class ThreadCreateSerializer(BodySerializer):
    title = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    metadata = MetadataField(required=False, default=dict)


class ToolSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField()
    sensitive = serializers.BooleanField()


class ToolInvokeSerializer(BodySerializer):
    arguments = serializers.DictField(default=dict)


class ToolResultSerializer(serializers.Serializer):
    name = serializers.CharField()
    output = serializers.CharField()
    is_error = serializers.BooleanField()


class SeedRunSerializer(BodySerializer):
    """The seed body (the view validates it with RunCreateSerializer: the bounds here say the same)."""

    input = StrictCharField(min_length=1)
    max_turns = option_field(BY_NAME["max_turns"], help=False)
    timeout_s = option_field(BY_NAME["timeout_s"], help=False)

    def get_fields(self) -> dict:
        return with_input_limit(super().get_fields())


class SeedRunResultSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    output = serializers.CharField(allow_null=True)
    stop_reason = serializers.CharField(allow_null=True)
    turns = serializers.IntegerField()
    ok = serializers.BooleanField()


class DecisionSerializer(BodySerializer):
    call_id = StrictCharField(max_length=200)
    approval = StrictBooleanField()
    arguments = NulFreeDictField(required=False, allow_null=True, default=None)  # stored as jsonb: no NUL
    reason = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=2000, default=None)

    def validate_empty_values(self, data):
        # `decisions` may be null, but not one of its items: DRF hands a list's allow_null to its child too.
        if data is None:
            raise serializers.ValidationError(['A decision is an object: {"call_id", "approval", …}, not null.'])
        return super().validate_empty_values(data)


SINGLE_DECISION = ("approval", "arguments", "reason")  # the one-call form of a decision; `decisions` is the batch


class ForkSerializer(BodySerializer):
    from_step = StrictIntegerField(min_value=0, help_text="The index of the last step the fork keeps.")
    mode = StrictChoiceField(choices=RunMode.choices, default=RunMode.SYNC)
    input = StrictCharField(min_length=1, required=False, help_text="An edited input (text) for the fork.")
    tool_output = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=100000,
        help_text="An edited result for step `from_step`, which must be a tool's: the fork's model sees this instead.",
    )

    def get_fields(self) -> dict:
        """The fork's own fields, then the options a fork may change (the run body's, without its defaults' help)."""
        fields = super().get_fields()
        return {**fields, **{name: option_field(BY_NAME[name], help=False) for name in FORK_OPTIONS}}


class AdvanceSerializer(BodySerializer):
    single_decision = SINGLE_DECISION  # read by the schema (agents/api/schema.py): never both forms at once
    approval = StrictBooleanField(required=False, allow_null=True, default=None)
    arguments = NulFreeDictField(required=False, allow_null=True, default=None)  # stored as jsonb: no NUL
    reason = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=2000, default=None)
    decisions = DecisionSerializer(
        many=True,
        required=False,
        allow_null=True,
        default=None,
        min_length=1,
        error_messages={"min_length": "Give at least one decision."},
        help_text="Decide several pending calls at once (all or nothing); instead of approval/arguments/reason.",
    )

    def validate(self, data: dict) -> dict:
        sent = self.initial_data if isinstance(self.initial_data, dict) else {}
        mixed = [k for k in SINGLE_DECISION if k in sent] if "decisions" in sent else []
        if mixed:  # the schema says the same (`not` both forms at once), null or not
            raise serializers.ValidationError({"decisions": [f"Send decisions or {', '.join(mixed)}, not both."]})
        if data.get("decisions") is not None:
            if not data["decisions"]:
                raise serializers.ValidationError({"decisions": ["Give at least one decision."]})
            data["decisions"] = [
                {"call_id": d["call_id"], "approved": d["approval"], "arguments": d["arguments"], "reason": d["reason"]}
                for d in data["decisions"]
            ]
        return data


class EventsQuerySerializer(serializers.Serializer):
    deltas = QueryChoiceField(
        choices=["0", "1"],
        required=False,
        default="1",
        help_text="0 leaves out assistant.delta and assistant.retry (the live text); 1, the default, keeps them.",
        error_messages={"invalid_choice": '"{input}" is not 0 or 1.'},
    )

"""Run and step shapes of API.md. Serializers validate and shape; they hold no business logic."""

from __future__ import annotations

import functools

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

import agents.api.schema  # noqa: F401  (registers the schema extensions for the fields below)
import agents.api.schema_steps  # noqa: F401  (registers the step union)
from agents.api import inputs
from agents.api.bodies import BodySerializer
from agents.api.inputs import json_type
from agents.api.schema import NO_NUL
from agents.engine import parts
from agents.engine.schemas import schema_problem
from agents.limits.prices import cost_text
from agents.models import Run, RunMode, RunProtocol, Step, Thread
from agents.runs import representation, search
from agents.runs.representation import USAGE_KEYS
from agents.runs.store import has_nul
from agents.runs.submit import LIMIT_MAX, MULTITASK_STRATEGIES, REQUEST_LIMITS


class StrictStringMixin:
    """Only a JSON string is a string: numbers, booleans, lists and objects are refused, never coerced with str()."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(f"Expected a string, got {json_type(data)}.", code="invalid")
        return super().to_internal_value(data)


class StrictCharField(StrictStringMixin, serializers.CharField):
    """A CharField that refuses any JSON value but a string; whitespace alone is blank even when it is kept."""

    def __init__(self, **kwargs) -> None:
        # Kept as sent: a limit then counts what the client sent, so the schema's maxLength is exact.
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not self.allow_blank and not value.strip():
            self.fail("blank")
        return value


class RunInputField(StrictCharField):
    """A run's input: a string, or (with AGENT_MAX_IMAGES > 0) a list of parts with images, each checked before
    anything is stored (agents/api/inputs.py). A string takes the same path as before parts existed."""

    def to_internal_value(self, data):
        if type(data) is list and settings.AGENT_MAX_IMAGES > 0:
            found = inputs.problems(data)
            if found:
                raise serializers.ValidationError(found, code="invalid")
            return data
        if not isinstance(data, str) and settings.AGENT_MAX_IMAGES > 0:
            raise serializers.ValidationError(f"Expected a string or a list of parts, got {json_type(data)}.")
        return super().to_internal_value(data)

    def run_validators(self, value) -> None:
        if type(value) is not list:  # a list's bounds are its parts' (inputs.problems), not a string's length
            super().run_validators(value)


@extend_schema_field({"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"})
class DecimalText(serializers.CharField):
    """An amount of money as a decimal string ("0.0123"): exact, where a JSON number would not be."""


class FallbackModelsField(serializers.ListField):
    """A run's fallback models: "provider/model" strings, each once. Its schema names the providers (and, where
    AGENT_MODELS_<NAME> lists some, the models) this server can use right now (agents/api/schema.py)."""


class StrictChoiceField(StrictStringMixin, serializers.ChoiceField):
    """A ChoiceField that refuses any JSON value but a string (so the error names the type, not the choices)."""


class NulFreeDictField(serializers.DictField):
    """A JSON object with no NUL character in any key or string inside it (PostgreSQL text and jsonb refuse NUL)."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if has_nul(value):
            raise serializers.ValidationError("Null characters are not allowed.", code="null_characters_not_allowed")
        return value


class StrictUUIDField(StrictStringMixin, serializers.UUIDField):
    """A UUID given as a JSON string (a number is refused, never coerced)."""


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField that takes only a JSON integer: "5", true or 5.0 are refused."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            kind = "a decimal number" if isinstance(data, float) else json_type(data)
            raise serializers.ValidationError(f"Expected an integer, got {kind}.", code="invalid")
        return data


class StrictBooleanField(serializers.BooleanField):
    """A BooleanField that takes only JSON true or false: "true", 1 or "yes" are refused."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            raise serializers.ValidationError(f"Expected true or false, got {json_type(data)}.", code="invalid")
        return data


class StrictFloatField(serializers.FloatField):
    """A FloatField that takes only a JSON number: "5" or true are refused."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise serializers.ValidationError(f"Expected a number, got {json_type(data)}.", code="invalid")
        try:
            return float(data)
        except OverflowError:  # an integer too large for a float (10**400): out of range, not a 500
            raise serializers.ValidationError("This number is too large.", code="max_value") from None


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


METADATA_SCHEMA = {
    "type": "object",
    "maxProperties": search.MAX_KEYS,
    "additionalProperties": {"oneOf": [{"type": "string", "maxLength": search.MAX_VALUE_CHARS, "pattern": NO_NUL},
                                       {"type": "number"}, {"type": "boolean"}]},
    "description": f"The client's own labels: a flat object (at most {search.MAX_KEYS} keys of letters, digits and "
    f"_ . : -; values strings of at most {search.MAX_VALUE_CHARS} characters, numbers or booleans). Find runs by "
    "them with ?metadata.<key>=<value>.",
}  # fmt: skip


@extend_schema_field(METADATA_SCHEMA)
class MetadataField(serializers.JSONField):
    """A flat JSON object of the client's labels (agents.runs.search.metadata_problem says what is refused)."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        problem = search.metadata_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value


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

    class Meta:
        model = Run
        fields = [
            "id", "status", "stop_reason", "ok", "output", "output_json", "turns", "input", "thread_id", "agent",
            "mode", "protocol", "provider", "model", "max_turns", "max_reflections", "timeout_s", "tools",
            "sensitive_tools", "pending_action", "pending_actions", "error", "usage", "cost", "max_total_tokens",
            "max_tool_calls", "tool_limits", "guardrails", "fallback_models", "metadata", "parent",
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


class RunDetailSerializer(RunSerializer):
    steps = StepSerializer(many=True, read_only=True)
    children = serializers.ListField(
        child=serializers.UUIDField(), read_only=True, help_text="The child runs its sub-agent calls started, in order."
    )

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "children", "steps"]
        read_only_fields = fields

    def to_representation(self, instance: Run) -> dict:
        return representation.run_detail_json(instance)


def bounds(name: str) -> dict:
    """min_value and max_value of a run setting, as the services bound it (one table for requests and agents)."""
    low, high = REQUEST_LIMITS[name]
    return {"min_value": low, "max_value": high}


class RunCreateSerializer(BodySerializer):
    input = StrictCharField(min_length=1)
    mode = StrictChoiceField(choices=RunMode.choices, default=RunMode.SYNC)
    protocol = StrictChoiceField(choices=RunProtocol.choices, required=False)
    provider = StrictCharField(max_length=32, required=False)
    model = StrictCharField(max_length=200, required=False)
    max_turns = StrictIntegerField(
        **bounds("max_turns"), required=False, help_text=f"Default: the agent's, or {settings.AGENT_DEFAULT_MAX_TURNS}."
    )
    max_reflections = StrictIntegerField(**bounds("max_reflections"), default=0)
    timeout_s = StrictFloatField(
        **bounds("timeout_s"),
        required=False,
        help_text=f"Default: the agent's, or {settings.AGENT_DEFAULT_TIMEOUT_S:g}.",
    )
    tools = serializers.ListField(child=StrictCharField(max_length=64), max_length=64, required=False)
    sensitive_tools = serializers.ListField(child=StrictCharField(max_length=64), max_length=64, default=list)
    approval_ttl_s = StrictIntegerField(
        **bounds("approval_ttl_s"), required=False, help_text="Seconds a paused call waits before it expires."
    )
    agent = StrictCharField(max_length=64, required=False, help_text="Start from this agent's configuration.")
    instructions = StrictCharField(max_length=8000, required=False, allow_blank=True)
    temperature = StrictFloatField(**bounds("temperature"), required=False)
    max_output_tokens = StrictIntegerField(**bounds("max_output_tokens"), required=False)
    output_schema = NulFreeDictField(
        required=False,
        help_text="A JSON Schema the final answer must satisfy: any JSON object, with no NUL character in a key or "
        "string inside it (else 400).",
    )
    thread_id = StrictUUIDField(required=False, help_text="Continue this thread (one of yours): its runs come first.")
    metadata = MetadataField(required=False)
    max_total_tokens = StrictIntegerField(
        min_value=1,
        max_value=LIMIT_MAX,
        required=False,
        help_text="Tokens all its model calls may use: it stops (usage_limit) before a call that would exceed them. "
        "Default: the agent's, else the server's (AGENT_DEFAULT_MAX_TOTAL_TOKENS); never above the server's ceiling.",
    )
    max_tool_calls = StrictIntegerField(
        min_value=1,
        max_value=LIMIT_MAX,
        required=False,
        help_text="Tool calls it may make: it stops (usage_limit) before one more. Default: the agent's, else the "
        "server's (AGENT_DEFAULT_MAX_TOOL_CALLS); never above the server's ceiling.",
    )
    tool_limits = serializers.DictField(
        child=StrictIntegerField(min_value=1, max_value=LIMIT_MAX),
        required=False,
        help_text='Calls per tool, e.g. {"search": 3}: a call past it is answered "exhausted" and the model goes on.',
    )
    guardrails = serializers.ListField(
        child=NulFreeDictField(),
        required=False,
        max_length=20,
        help_text="Checks of the input, the final answer and tool calls, added to the agent's (docs/guardrails.md).",
    )
    fallback_models = FallbackModelsField(
        child=StrictCharField(max_length=250),
        required=False,
        max_length=5,
        help_text='"provider/model" tried in order when its model fails with a retryable error or is rate-limited.',
    )
    multitask_strategy = StrictChoiceField(
        choices=[(s, s) for s in MULTITASK_STRATEGIES],
        default="reject",
        help_text="With thread_id, when the thread has a run in progress: reject it (409), enqueue this run after it, "
        "interrupt it (cancelled, its steps kept for this run to see), or rollback (cancelled and deleted).",
    )

    def validate_output_schema(self, value: dict) -> dict:
        problem = schema_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, data: dict) -> dict:
        return with_input_parts(data)

    def get_fields(self) -> dict:
        # Shallow copies: DRF deep-copies every declared field per instance (re-running each field's __init__),
        # ~0.15 ms per create; binding a copy never touches the declared field, and these fields keep no state.
        return with_input_limit({name: shallow(field) for name, field in self._declared_fields.items()})


def shallow(field: serializers.Field) -> serializers.Field:
    """What `copy.copy` makes of a DRF field (a new instance sharing the attributes; DRF fields define neither
    `__copy__` nor `__reduce__`, nor slots), without the pickle protocol's detour: the 17 fields of a create in
    ~15 µs instead of ~46."""
    new = object.__new__(type(field))
    new.__dict__.update(field.__dict__)
    return new


@functools.cache
def _input_field(limit: int) -> RunInputField:
    return RunInputField(min_length=1, max_length=limit)


def with_input_parts(data: dict) -> dict:
    """A list input as the services take it: `input_parts` as given, `input` their text (lists, search, titles)."""
    value = data.get("input")
    if type(value) is list:
        data["input_parts"], data["input"] = value, parts.text_of(value)
    return data


def with_input_limit(fields: dict) -> dict:
    """`input` bounded by AGENT_MAX_INPUT_CHARS as it is now (a setting, so read per request and per schema)."""
    fields["input"] = shallow(_input_field(settings.AGENT_MAX_INPUT_CHARS))
    return fields


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

    class Meta(ThreadSerializer.Meta):
        fields = [*ThreadSerializer.Meta.fields, "runs"]
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
    max_turns = StrictIntegerField(**bounds("max_turns"), required=False)
    timeout_s = StrictFloatField(**bounds("timeout_s"), required=False)

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
    provider = StrictCharField(max_length=32, required=False)
    model = StrictCharField(max_length=200, required=False)
    max_turns = StrictIntegerField(**bounds("max_turns"), required=False)
    timeout_s = StrictFloatField(**bounds("timeout_s"), required=False)
    instructions = StrictCharField(max_length=8000, required=False, allow_blank=True)
    temperature = StrictFloatField(**bounds("temperature"), required=False)
    max_output_tokens = StrictIntegerField(**bounds("max_output_tokens"), required=False)


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


class QueryChoiceField(serializers.ChoiceField):
    """A query parameter from a fixed set; given empty (`?deltas=`) it is refused like any other value."""

    def get_value(self, dictionary):
        return dictionary.get(self.field_name, serializers.empty)


class EventsQuerySerializer(serializers.Serializer):
    deltas = QueryChoiceField(
        choices=["0", "1"],
        required=False,
        default="1",
        help_text="0 leaves out assistant.delta and assistant.retry (the live text); 1, the default, keeps them.",
        error_messages={"invalid_choice": '"{input}" is not 0 or 1.'},
    )

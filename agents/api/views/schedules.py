"""Schedules over HTTP (docs/api.md, "Schedules"; docs/schedules.md): validate → agents.schedules.services →
serialize. Per user: another user's schedule is 404, reviewers included (a schedule starts runs as its owner; staff
see every schedule in the console). The run options are the run body's own fields (`RunCreateSerializer`), so they
are refused here exactly as `POST /api/v1/runs` refuses them; what needs the database (an unknown agent, provider,
tool, the cron expression, the time zone) is the service's to refuse, with the same 400s."""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from agents.api.bodies import BodySerializer
from agents.api.fields import StrictBooleanField, StrictCharField
from agents.api.schema import FREE_FORM_OBJECT, TOOL_NAMES, WHITESPACE, usable_providers
from agents.api.serializers import RunCreateSerializer
from agents.models import Schedule
from agents.runconfig.options import BY_NAME
from agents.schedules import services as schedules

CRON_HELP = (
    "Five fields, minute hour day-of-month month day-of-week, read as Debian's cron reads them (`0 9 * * 1-5`; "
    "names such as MON and JAN; L, LW, 5L and MON#2 too), or @yearly, @annually, @monthly, @weekly, @daily, "
    "@midnight, @hourly. A seconds field or any other form is 400."
)


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


# What a client can check before it sends (whether each field's values are in range is cronsim's to say: 400): a
# nickname in any case, or five fields of cron's characters, with Python's whitespace around and between them.
CRON_PATTERN = (
    f"^[{WHITESPACE}]*(?:@(?:{'|'.join(_any_case(name[1:]) for name in schedules.NICKNAMES)})"
    f"|[0-9A-Za-z*,/#-]+(?:[{WHITESPACE}]+[0-9A-Za-z*,/#-]+){{4}})[{WHITESPACE}]*$"
)
TIMEZONE_HELP = "An IANA time zone (Europe/Paris) the expression is read in, daylight saving time included."
_JSON_TYPES: dict[type, dict[str, Any]] = {
    bool: {"type": "boolean"},
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    dict: FREE_FORM_OBJECT,
}


def _option_schema(name: str) -> dict:
    """A stored option's JSON type, from the option list (`agent`, an agent's name: a string)."""
    option = BY_NAME.get(name)
    if option is None:
        return {"type": "string"}
    if option.choices:
        return {"type": "string", "enum": [value for value, _ in option.choices]}
    if option.types == (list,):
        return {"type": "array", "items": dict(_JSON_TYPES[option.items or str])}
    if option.types == (dict,) and option.items is not None:
        return {"type": "object", "additionalProperties": dict(_JSON_TYPES[option.items])}
    return dict(_JSON_TYPES[option.types[-1]])


OPTIONS_SCHEMA = {
    "type": "object",
    "description": "The run options its runs start with: only those given (the others are the agent's, else the "
    "defaults, when each run starts).",
    "properties": {name: _option_schema(name) for name in schedules.RUN_OPTIONS},
    "additionalProperties": False,
}


@extend_schema_field(OPTIONS_SCHEMA)
class RunOptionsField(serializers.DictField):
    """A schedule's stored run options, as given."""


class ScheduleSerializer(serializers.ModelSerializer):
    options = RunOptionsField(read_only=True)
    last_run = serializers.UUIDField(
        source="last_run_id", read_only=True, allow_null=True, help_text="The run the last tick started, or null."
    )
    next_run_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="When it fires next (UTC); null while disabled."
    )
    last_run_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="When it last fired, whether or not a run started; null before."
    )
    last_error = serializers.CharField(
        read_only=True, help_text="Why the last tick started no run (a used-up quota, a deleted agent); else empty."
    )

    class Meta:
        model = Schedule
        fields = [
            "id", "name", "cron", "timezone", "input", "options", "enabled", "next_run_at", "last_run_at", "last_run",
            "last_error", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


def run_option_fields(*, nullable: bool) -> dict[str, serializers.Field]:
    """The run body's own fields for the run options (`RunCreateSerializer`: the same types, limits and help), each
    optional; `nullable` (an edit): null removes the option."""
    declared = RunCreateSerializer._declared_fields
    fields = {}
    for name in schedules.RUN_OPTIONS:
        field = declared[name]
        # Deep copies of what it was made with: a list's child is made anew, unbound (as DRF's own copies are).
        args, kwargs = copy.deepcopy(field._args), {**copy.deepcopy(field._kwargs), "required": False}
        if nullable:
            kwargs["allow_null"] = True
            kwargs.pop("default", None)
        fields[name] = type(field)(*args, **kwargs)
    return fields


OPTIONS_HELP = (
    "The run options as one object instead of at the top level (the same fields, types and limits); it replaces "
    "the schedule's. Not both forms in one body (400)."
)
BOTH_FORMS = "Send the run options at the top level or in `options`, not both."


class ScheduleRunOptionsSerializer(BodySerializer):
    """The run options as one object (`options`), each field the run body's own."""

    def get_fields(self) -> dict:
        return run_option_fields(nullable=False)


class _RunOptionsInBody:
    """A body's run options: at its top level (by name), or as one object `options`; never both."""

    initial_data: object

    def validate(self, data: dict) -> dict:
        sent = self.initial_data if isinstance(self.initial_data, dict) else {}
        if "options" in sent and any(name in sent for name in schedules.RUN_OPTIONS):
            raise ValidationError({"options": [BOTH_FORMS]})
        return data


class ScheduleCreateSerializer(_RunOptionsInBody, BodySerializer):
    cron = StrictCharField(max_length=100, help_text=CRON_HELP)
    timezone = StrictCharField(max_length=64, default="UTC", help_text=TIMEZONE_HELP)
    name = StrictCharField(max_length=100, allow_blank=True, default="")
    enabled = StrictBooleanField(default=True)
    options = ScheduleRunOptionsSerializer(required=False, help_text=OPTIONS_HELP)

    def get_fields(self) -> dict:
        fields = super().get_fields()
        # Text only (a run's list of parts is not kept by a schedule), bounded by AGENT_MAX_INPUT_CHARS as it is now.
        fields["input"] = StrictCharField(min_length=1, max_length=settings.AGENT_MAX_INPUT_CHARS)
        return {**fields, **run_option_fields(nullable=False)}


class ScheduleUpdateSerializer(_RunOptionsInBody, BodySerializer):
    """Any of the create's fields; a run option given as null is removed (its runs then use the agent's, or the
    default), and `options` replaces them all."""

    cron = StrictCharField(max_length=100, required=False, help_text=CRON_HELP)
    timezone = StrictCharField(max_length=64, required=False, help_text=TIMEZONE_HELP)
    name = StrictCharField(max_length=100, allow_blank=True, required=False)
    enabled = StrictBooleanField(required=False)
    options = ScheduleRunOptionsSerializer(required=False, help_text=OPTIONS_HELP)

    def get_fields(self) -> dict:
        fields = super().get_fields()
        fields["input"] = StrictCharField(min_length=1, max_length=settings.AGENT_MAX_INPUT_CHARS, required=False)
        return {**fields, **run_option_fields(nullable=True)}


class _ScheduleBodyExtension(OpenApiSerializerExtension):
    """A body names its provider as a run body does (one this server can use right now), tool names are strings,
    and the run options come in one form or the other, never both."""

    target_class = ScheduleCreateSerializer

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        properties = schema["properties"]
        if isinstance(self.target, ScheduleUpdateSerializer):  # null removes it: the enum's null, as for `protocol`
            properties["provider"] = {"type": "string", "enum": [*usable_providers(), None], "nullable": True}
        else:
            properties["provider"] = {"type": "string", "enum": usable_providers()}
        properties["tools"]["description"] = TOOL_NAMES
        properties["cron"] = {**properties["cron"], "pattern": CRON_PATTERN}
        schema["not"] = {"anyOf": [{"required": ["options", name]} for name in schedules.RUN_OPTIONS]}
        return schema


class _ScheduleUpdateExtension(_ScheduleBodyExtension):
    target_class = ScheduleUpdateSerializer


class _ScheduleRunOptionsExtension(OpenApiSerializerExtension):
    target_class = ScheduleRunOptionsSerializer

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["properties"]["provider"] = {"type": "string", "enum": usable_providers()}
        schema["properties"]["tools"]["description"] = TOOL_NAMES
        return schema


class ScheduleViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """The caller's own schedules: each starts a background run of theirs at the times its cron expression names."""

    serializer_class = ScheduleSerializer
    lookup_value_converter = "anyuuid"  # any other id matches no route: the API's JSON 404

    def get_queryset(self):
        return Schedule.objects.filter(owner_id=self.request.user.pk).order_by("-created_at")

    @extend_schema(request=ScheduleCreateSerializer, responses={201: ScheduleSerializer})
    def create(self, request):
        body = ScheduleCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        options = {name: data.pop(name) for name in schedules.RUN_OPTIONS if name in data}
        options = dict(data.pop("options", options))
        schedule = schedules.create_schedule(
            owner=request.user,
            cron=data["cron"],
            input=data["input"],
            timezone_name=data["timezone"],
            name=data["name"],
            enabled=data["enabled"],
            options=options,
        )
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ScheduleUpdateSerializer, responses={200: ScheduleSerializer})
    def partial_update(self, request, pk=None):
        schedule = self.get_object()
        body = ScheduleUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        schedule = schedules.update_schedule(schedule=schedule, changes=dict(body.validated_data))
        return Response(ScheduleSerializer(schedule).data)

    def perform_destroy(self, instance: Schedule) -> None:
        schedules.delete_schedule(schedule=instance)

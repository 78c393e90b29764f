"""The API's field types and the run options' fields. A strict field takes only the JSON type it names: a number is
never made a string with str(), nor "5" an integer. The run body's option fields are made from the run
configuration's option list (agents/runconfig/options.py), so a create, a fork, a seed and the schema bound each
option alike. The serializers (agents/api/serializers.py) and the views' own bodies are built from them."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.api import inputs
from agents.api.inputs import json_type
from agents.api.schema import NO_NUL
from agents.runconfig.options import BY_NAME, OPTIONS, Option
from agents.runconfig.validate import VALUE_CHECKS
from agents.runs import search
from agents.runs.store import has_nul


class StrictStringMixin:
    """Only a JSON string is a string: numbers, booleans, lists and objects are refused, never coerced with str()."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(f"Expected a string, got {json_type(data)}.", code="invalid")
        return super().to_internal_value(data)  # type: ignore[misc]  # a mixin: the field class after it has it


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
    """A run's input: a string, or (with AGENT_MAX_IMAGES or AGENT_MAX_DOCUMENTS > 0) a list of parts with images and
    documents, each checked before anything is stored (agents/api/inputs.py), a document URL's content fetched. A
    string takes the same path as before parts existed."""

    def to_internal_value(self, data):
        lists = inputs.lists_taken()
        if type(data) is list and lists:
            found = inputs.problems(data)
            if not found:
                data, found = inputs.fetched(data)
            if found:
                raise serializers.ValidationError(found, code="invalid")
            return data
        if not isinstance(data, str) and lists:
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


# Option lists whose field is a class of its own (its schema is the server's: agents/api/schema.py).
LIST_FIELDS: dict[str, type[serializers.ListField]] = {"fallback_models": FallbackModelsField}


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
            value = float(data)
        except OverflowError:  # an integer too large for a float (10**400): out of range, not a 500
            raise serializers.ValidationError("This number is too large.", code="max_value") from None
        if not math.isfinite(value):  # NaN passes every bound: refused here (strict JSON never carries one anyway)
            raise serializers.ValidationError("Expected a finite number.", code="invalid")
        return value


class QueryChoiceField(serializers.ChoiceField):
    """A query parameter from a fixed set; given empty (`?deltas=`) it is refused like any other value."""

    def get_value(self, dictionary):
        return dictionary.get(self.field_name, serializers.empty)


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


# The fields made from the run configuration's option list (agents/runconfig/options.py).


def bounds(name: str) -> dict:
    """min_value and max_value of a run setting, as the services bound it (one list for requests and agents)."""
    option = BY_NAME[name]
    return {"min_value": option.low, "max_value": option.high}


def _help(option: Option) -> dict:
    if not option.help:
        return {}
    default = getattr(settings, option.setting) if option.setting else option.default
    shown = format(default, "g") if isinstance(default, float) else str(default)
    return {"help_text": option.help.replace("{default}", shown)}


def _scalar_field(option: Option, **kwargs) -> serializers.Field:
    if option.choices:
        return StrictChoiceField(choices=list(option.choices), **kwargs)
    if option.types == (str,):
        return StrictCharField(max_length=option.max_length, allow_blank=option.blank, **kwargs)
    if option.types == (bool,):
        return StrictBooleanField(**kwargs)
    limits = {"min_value": option.low, "max_value": option.high}
    if option.types == (int,):
        return StrictIntegerField(**limits, **kwargs)
    return StrictFloatField(**limits, **kwargs)


def _item_field(option: Option) -> serializers.Field:
    if option.items is dict:
        return NulFreeDictField()
    if option.items is int:
        return StrictIntegerField(min_value=option.low, max_value=option.high)
    return StrictCharField(max_length=option.max_length)


def option_field(option: Option, *, help: bool = True) -> serializers.Field:
    """The run body's field of an option (agents/runconfig/options.py): its type, bounds, default and help."""
    kwargs = _help(option) if help else {}
    if option.default not in (None, "") and option.setting is None:
        kwargs["default"] = list if option.types == (list,) else option.default
    else:
        kwargs["required"] = False
    if option.types == (dict,) and option.items is None:  # a JSON object, checked as the option says
        check = VALUE_CHECKS.get(option.name)
        return NulFreeDictField(validators=[_validator(check)] if check else [], **kwargs)
    if option.types == (dict,):
        return serializers.DictField(child=_item_field(option), **kwargs)
    if option.types == (list,):
        cls = LIST_FIELDS.get(option.name, serializers.ListField)
        return cls(child=_item_field(option), max_length=option.max_items, **kwargs)
    return _scalar_field(option, **kwargs)


def _validator(check: Callable[[Any], str | None]) -> Callable[[Any], None]:
    def validate(value: Any) -> None:
        problem = check(value)
        if problem:
            raise serializers.ValidationError(problem)

    return validate


# The run body's option fields, in the list's order.
OPTION_FIELDS = {option.name: option_field(option) for option in OPTIONS if option.request}


# A body's fields as each request binds them: copies, and `input` bounded as the settings say now.


def shallow(field: serializers.Field) -> serializers.Field:
    """What `copy.copy` makes of a DRF field (a new instance sharing the attributes; DRF fields define neither
    `__copy__` nor `__reduce__`, nor slots), without the pickle protocol's detour: a third of the time
    (docs/performance.md, "Figures behind the code")."""
    new = object.__new__(type(field))
    new.__dict__.update(field.__dict__)
    return new


@functools.cache
def _input_field(limit: int) -> RunInputField:
    return RunInputField(min_length=1, max_length=limit)


def with_input_limit(fields: dict) -> dict:
    """`input` bounded by AGENT_MAX_INPUT_CHARS as it is now (a setting, so read per request and per schema)."""
    fields["input"] = shallow(_input_field(settings.AGENT_MAX_INPUT_CHARS))
    return fields

"""The built-in guardrails, one class each, and the Guard the engine asks (agents.engine.types.Guard).

A rail answers `finding` (why it trips, or None) for a stage it is on; the guard asks its rails in their order and
the first that trips wins. A rail that cannot make its check (the moderation endpoint is down, a team's hook raised)
trips with action "stop" whatever it was configured with: it fails closed, and a correction could not help.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar

from django.conf import settings
from django.utils import timezone

from agents.engine import schemas
from agents.engine.types import ModelError, Verdict
from agents.guardrails import pii
from agents.guardrails.normalise import Normalised, normalise

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 300  # of a reason a hook or a schema gives: it goes into a step and, to correct, to the model


class Subject:
    """What one check looks at: the stage's text (for tool arguments, their JSON), the tool, its arguments."""

    def __init__(
        self,
        stage: str,
        text: str | None,
        tool: str | None,
        arguments: dict[str, Any] | None,
        deadline: datetime | None,
    ) -> None:
        self.stage, self.given, self.tool, self.arguments, self.deadline = stage, text, tool, arguments, deadline

    @cached_property
    def text(self) -> str:
        if self.given is not None:
            return self.given
        return json.dumps(self.arguments or {}, ensure_ascii=False, sort_keys=True)

    @cached_property
    def read(self) -> Normalised:
        """The text as a reader sees it (agents/guardrails/normalise.py), worked out once for every rail."""
        return normalise(self.text)

    def time_left(self) -> float:
        """Seconds until the run's deadline (the settings' budget of one model call when it has none)."""
        if self.deadline is None:
            return float(settings.AGENT_LLM_TIMEOUT_S) * (int(settings.AGENT_LLM_MAX_RETRIES) + 1)
        left: float = (self.deadline - timezone.now()).total_seconds()
        return left


@dataclass(frozen=True)
class Rail:
    """One configured guardrail: its name, the stages it is on, what a trip does (stop, correct, redact)."""

    name: str
    on: frozenset[str]
    action: str
    calls_out: ClassVar[bool] = False  # it asks something outside this process (no database connection is held)

    def redact(self, text: str) -> str:
        return text

    def check(self, subject: Subject) -> Verdict | None:
        reason = self.finding(subject)
        return None if reason is None else Verdict(self.name, reason, self.action)

    def finding(self, subject: Subject) -> str | None:
        raise NotImplementedError

    def failed(self, why: str) -> Verdict:
        """Fail closed: a check that could not be made stops the run."""
        return Verdict(self.name, f"the check could not be made ({why})", "stop")


@dataclass(frozen=True)
class RegexRail(Rail):
    patterns: tuple[re.Pattern[str], ...]

    def finding(self, subject: Subject) -> str | None:
        read = subject.read
        # as read (a disguised word) and, where that differs, as written (a pattern in another script: "пароль")
        texts = (read.text, read.original) if read.changed else (read.text,)
        for number, pattern in enumerate(self.patterns, 1):
            if any(pattern.search(text) is not None for text in texts):  # the reason never shows what matched
                what = "arguments match" if subject.stage == "tool_arguments" else "text matches"
                return f"the {what} deny pattern {number}"
        return None


@dataclass(frozen=True)
class PiiRail(Rail):
    kinds: tuple[str, ...]

    def redact(self, text: str) -> str:
        return pii.redact(text, self.kinds) if self.action == "redact" else text

    def finding(self, subject: Subject) -> str | None:
        if self.action == "redact":  # redacted already: nothing is left to find
            return None
        kinds = pii.found(subject.read, self.kinds)
        return f"it contains personal data ({', '.join(kinds)})" if kinds else None


@dataclass(frozen=True)
class MaxLengthRail(Rail):
    chars: int

    def finding(self, subject: Subject) -> str | None:
        length = len(subject.text)
        return f"it is {length} characters long, more than {self.chars}" if length > self.chars else None


@dataclass(frozen=True)
class ToolSchemaRail(Rail):
    tool: str
    schema: dict[str, Any]

    def finding(self, subject: Subject) -> str | None:
        if subject.tool != self.tool:
            return None
        try:
            error = schemas.first_error(self.schema, subject.arguments or {})
        except schemas.SchemaUnusable as exc:
            return f"the schema cannot be used: {exc}"
        return None if error is None else _short(f"they do not fit its schema: {error}")


@dataclass(frozen=True)
class ModerationRail(Rail):
    model: str | None  # None: AGENT_MODERATION_MODEL, read at each check
    categories: tuple[str, ...]  # only these trip; empty: whatever the endpoint flags
    calls_out: ClassVar[bool] = True

    def check(self, subject: Subject) -> Verdict | None:
        if not subject.text.strip():
            return None
        from agents.providers import moderation  # the SDK is imported by a run that asks, never at start-up

        model = self.model or str(settings.AGENT_MODERATION_MODEL)
        try:
            found = moderation.moderate(subject.text, model, subject.time_left())
        except ModelError as exc:
            return self.failed(str(exc) or "the moderation call failed")
        if self.categories:
            named = [category for category in found.categories if category in self.categories]
            if not named:
                return None
        elif found.flagged:
            named = list(found.categories)
        else:
            return None
        return Verdict(self.name, f"the moderation model flagged it ({', '.join(named) or 'no category'})", self.action)


@dataclass(frozen=True)
class HookRail(Rail):
    hook: Callable[..., Any]
    calls_out: ClassVar[bool] = True

    def check(self, subject: Subject) -> Verdict | None:
        try:
            found = self.hook(subject.stage, subject.text, tool=subject.tool, arguments=subject.arguments)
        except Exception as exc:  # a team's code: whatever it raises, the run is not let through
            log.warning("Guardrail hook %r raised %s", self.name, type(exc).__name__)  # its message may hold the text
            return self.failed(f"the hook raised {type(exc).__name__}")
        if found is None:
            return None
        if isinstance(found, Verdict):
            action = found.action if found.action in ("stop", "correct") else self.action
            return Verdict(found.guardrail or self.name, _short(found.reason), action)
        if isinstance(found, str):
            return Verdict(self.name, _short(found or "the hook refused it"), self.action)
        return self.failed(f"the hook returned a {type(found).__name__}, not None, a string or a Verdict")


@dataclass(frozen=True)
class BrokenRail(Rail):
    """Guardrails stored with a run that no longer build (a hook since removed): every check stops the run."""

    problem: str

    def check(self, subject: Subject) -> Verdict | None:
        return self.failed(f"the guardrails cannot be used: {self.problem}")


def _short(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


class RunGuard:
    """A run's guardrails for the engine: redaction by every rail of the stage in order; checks in order, the first
    trip wins. `calls_out`: some rail asks outside the process (the host holds no connection meanwhile)."""

    def __init__(self, rails: list[Rail], deadline: Callable[[], datetime | None] = lambda: None) -> None:
        self.rails, self.deadline = rails, deadline
        self.calls_out = any(rail.calls_out for rail in rails)

    def watches(self, stage: str) -> bool:
        """Whether any rail is on `stage` (with one on the output, the host does not stream a reply's words live: a
        client would read them before they are redacted or refused)."""
        return any(stage in rail.on for rail in self.rails)

    def redact(self, stage: str, text: str) -> str:
        for rail in self.rails:
            if stage in rail.on:
                text = rail.redact(text)
        return text

    def check(
        self, stage: str, text: str | None = None, tool: str | None = None, arguments: dict[str, Any] | None = None
    ) -> Verdict | None:
        subject = Subject(stage, text, tool, arguments, self.deadline())
        for rail in self.rails:
            if stage in rail.on:
                verdict = rail.check(subject)
                if verdict is not None:
                    return verdict
        return None

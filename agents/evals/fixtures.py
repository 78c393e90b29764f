"""Recorded tool calls that answer a replayed case's calls (pure Python: no database).

Matching rule: a call is answered by a fixture of the same tool whose `arguments` are equal to the call's as JSON
values — key order and a number's spelling (1 or 1.0) do not matter, everything else does (strings are compared
exactly, true is not 1). The first unused matching fixture answers, in file order; once every match has been used,
the last one answers again (a repeated read). A call that pauses for approval is decided by the first unused
matching fixture whose `arguments` or `original_arguments` equal its own: a denied fixture denies it, any other
approves it (with the fixture's arguments, as the reviewer edited them) and then answers it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FIXTURE_KEYS = frozenset({"tool", "arguments", "output", "is_error", "denied", "reason", "original_arguments"})
LISTED = 8  # fixtures named in an unmatched call's reason
LABEL_CHARS = 160


@dataclass(frozen=True)
class Fixture:
    """One recorded call: what the tool answered, or that a reviewer denied it (then it never ran)."""

    tool: str
    arguments: dict[str, Any]
    output: str = ""
    is_error: bool = False
    denied: bool = False
    reason: str | None = None  # the denial's reason, fed back to the model as it was
    original_arguments: dict[str, Any] | None = None  # as the model asked, when a reviewer edited them

    def label(self) -> str:
        return label(self.tool, self.arguments) + (" (denied)" if self.denied else "")


def canonical(value: Any) -> str:
    """The JSON text two equal argument values share."""
    return json.dumps(_plain(value), sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def _plain(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def label(tool: str, arguments: Any) -> str:
    """`calculator {"expression": "12*7"}`, cut short."""
    text = f"{tool} {canonical(arguments)}"
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def parse_fixtures(raw: Any) -> tuple[Fixture, ...]:
    """Fixtures from a case's `fixtures:` list; ValueError says which one is wrong and how."""
    if not isinstance(raw, list):
        raise ValueError("fixtures must be a list")
    return tuple(_fixture(item, i + 1) for i, item in enumerate(raw))


def _fixture(item: Any, number: int) -> Fixture:
    where = f"fixture #{number}"
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be a mapping")
    unknown = sorted(set(item) - FIXTURE_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown key(s): {', '.join(map(str, unknown))}")
    tool, arguments, original = item.get("tool"), item.get("arguments", {}), item.get("original_arguments")
    if not isinstance(tool, str) or not tool:
        raise ValueError(f"{where} needs a tool name")
    if not isinstance(arguments, dict) or not (original is None or isinstance(original, dict)):
        raise ValueError(f"{where}: arguments must be a mapping")
    denied, is_error = item.get("denied", False), item.get("is_error", False)
    if not isinstance(denied, bool) or not isinstance(is_error, bool):
        raise ValueError(f"{where}: denied and is_error must be true or false")
    output = item.get("output")
    if isinstance(output, int | float) and not isinstance(output, bool):
        output = str(output)  # `output: 83`, edited without quotes
    if not denied and not isinstance(output, str):
        raise ValueError(f"{where} needs an output (a string), or denied: true")
    reason = item.get("reason")
    return Fixture(
        tool=tool,
        arguments=arguments,
        output=output if isinstance(output, str) else "",
        is_error=is_error,
        denied=denied,
        reason=None if reason is None else str(reason),
        original_arguments=original,
    )


class FixtureBook:
    """The fixtures of one replay: which one answers each call, and the first call none could answer."""

    def __init__(self, fixtures: Iterable[Fixture]) -> None:
        self.fixtures = tuple(fixtures)
        self._keys = [canonical(f.arguments) for f in self.fixtures]
        self._asked = [None if f.original_arguments is None else canonical(f.original_arguments) for f in self.fixtures]
        self._used: set[int] = set()
        self.problem: str | None = None  # set by the first unmatched call; the replay stops there

    def answer(self, tool: str, arguments: Any) -> Fixture | None:
        """The fixture that answers this call (now used), or None (recorded as the replay's problem)."""
        key = canonical(arguments)
        found = [i for i, f in enumerate(self.fixtures) if f.tool == tool and not f.denied and self._keys[i] == key]
        return self._take(found, tool, arguments)

    def decide(self, tool: str, arguments: Any) -> Fixture | None:
        """The fixture that decides this paused call: used now when it denies it (an approved one answers later)."""
        key = canonical(arguments)
        found = [i for i, f in enumerate(self.fixtures) if f.tool == tool and key in (self._keys[i], self._asked[i])]
        if not found:
            return self._take(found, tool, arguments)
        chosen = self._first_unused(found)
        if self.fixtures[chosen].denied:
            self._used.add(chosen)
        return self.fixtures[chosen]

    def _take(self, found: list[int], tool: str, arguments: Any) -> Fixture | None:
        if not found:
            if self.problem is None:
                self.problem = self._unmatched(tool, arguments)
            return None
        chosen = self._first_unused(found)
        self._used.add(chosen)
        return self.fixtures[chosen]

    def _first_unused(self, found: list[int]) -> int:
        """The first match not used yet; once all are, the last one (a repeated read answers as it last did)."""
        return next((i for i in found if i not in self._used), found[-1])

    def _unmatched(self, tool: str, arguments: Any) -> str:
        names = [f.label() for f in self.fixtures[:LISTED]]
        if len(self.fixtures) > LISTED:
            names.append(f"… and {len(self.fixtures) - LISTED} more")
        return f"unmatched tool call {label(tool, arguments)}; fixtures: {'; '.join(names) or 'none'}"

"""Running one tool call: every failure of the call itself becomes an observation, never an exception."""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import SchemaError

from agents.engine.schemas import SchemaUnusable, first_error
from agents.engine.types import Tool, ToolWaits
from agents.engine.wrapping import prepare


@dataclass(frozen=True)
class Toolset:
    """The tools of one run, the host-injected context they receive, and the output bound."""

    tools: Mapping[str, Tool]
    context: Any = None
    max_output_chars: int = 4000

    def instant(self, name: str) -> bool:
        """Whether the named tool declares itself instant (an unknown name is not)."""
        tool = self.tools.get(name)
        return tool is not None and tool.instant

    def sensitive(self, name: str) -> bool:
        """Whether the named tool declares itself sensitive (a run may list more: `pending.is_sensitive`)."""
        tool = self.tools.get(name)
        return tool is not None and tool.sensitive

    def delivery(self, name: str) -> str | None:
        """How the named tool's calls are delivered, when its tool steps must say so."""
        tool = self.tools.get(name)
        return (tool.delivery or None) if tool is not None else None


@dataclass(frozen=True)
class ToolResult:
    output: str
    is_error: bool


def value_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """The first violation of `schema` by any JSON value, or None (an output schema's check)."""
    try:
        return first_error(schema, value)
    except SchemaError:
        return "the output schema is invalid"
    except SchemaUnusable as exc:
        return f"the output schema is unusable: {exc}"


def schema_error(parameters: Mapping[str, Any], arguments: Any) -> str | None:
    """The first JSON Schema violation of `arguments`, or None."""
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    try:
        return first_error(parameters, arguments)
    except SchemaError:
        return "the tool's schema is invalid"
    except SchemaUnusable as exc:
        return f"the tool's schema is unusable: {exc}"


# Tool-call arguments that were not a JSON object reach the engine as {RAW: the text the model wrote} (the providers'
# parsers), and go back to the provider as that text.
RAW = "__raw__"
_JSON_KINDS = {list: "a JSON array", str: "a JSON string", bool: "a JSON boolean", int: "a JSON number",
               float: "a JSON number", type(None): "JSON null"}  # fmt: skip


def raw_arguments(arguments: Any) -> str | None:
    """The text of arguments that were not a JSON object, or None (an object, as usual)."""
    if type(arguments) is dict and len(arguments) == 1:
        raw = arguments.get(RAW)
        return raw if isinstance(raw, str) else None
    return None


def not_an_object(raw: str) -> str:
    """What is wrong with a call's arguments that are not a JSON object, in words the model can act on."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"they are not valid JSON ({exc.msg} at position {exc.pos})"
    except ValueError:
        return "they are not valid JSON"
    return f"they are {_JSON_KINDS.get(type(value), 'not an object')}, not an object"


def unknown_tool(name: str, known: Iterable[str]) -> str:
    """The observation for a call to a tool the run does not have: the closest names, then every name."""
    names = sorted(known)
    by_lower = {n.lower(): n for n in names}
    close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"Unknown tool '{name}'.{hint} Available tools: {', '.join(names) or 'none'}."


def _call_with_timeout(tool: Tool, arguments: dict[str, Any], context: Any, timeout_s: float) -> str:
    """Run the tool; a tool marked `inline` runs in this thread, others in a daemon thread we stop waiting for."""
    if tool.inline:
        return str(tool(arguments, context))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = tool(arguments, context)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(max(timeout_s, 0.0))
    if worker.is_alive():
        raise TimeoutError(f"timed out after {timeout_s:.3g} s")
    if "error" in box:
        raise box["error"]
    return str(box.get("value", ""))


def run_tool(
    toolset: Toolset, name: str, arguments: Any, timeout_s: float, step: int | None = None, call_id: str | None = None
) -> ToolResult:
    """Validate and run one call; unknown tools, bad arguments, errors and timeouts become error results.

    `step` is the index the call's tool step will take: a host context with `for_call` derives the call's
    idempotency key from it (run id + step), so a side-effecting tool can refuse to repeat itself on a resume.
    """
    tool = toolset.tools.get(name)
    if tool is None:
        return _error(toolset, unknown_tool(name, toolset.tools))
    problem = _argument_error(tool, arguments)
    if problem is not None:
        return _error(toolset, problem)
    try:
        output = _call_with_timeout(
            tool, arguments, _call_context(toolset.context, step, call_id), min(tool.timeout_s, timeout_s)
        )
    except TimeoutError as exc:
        return _error(toolset, f"Tool '{name}' {exc}.")
    except ToolWaits:
        raise  # not a failure: the result comes later (the engine ends the unit)
    except Exception as exc:  # noqa: BLE001 - a tool failure is an observation the model can recover from
        return _error(toolset, f"Tool '{name}' failed: {exc or type(exc).__name__}")
    return ToolResult(prepare(output, toolset.max_output_chars), False)


def _argument_error(tool: Tool, arguments: Any) -> str | None:
    """Why the call cannot run with these arguments (not a JSON object, or against the tool's schema), or None."""
    raw = raw_arguments(arguments)
    if raw is not None:
        return (
            f"The arguments of the call to '{tool.name}' were not a JSON object: {not_an_object(raw)}. The tool did "
            "not run; call it again with its arguments as one JSON object."
        )
    problem = schema_error(tool.parameters, arguments)
    if problem is not None:
        return f"Invalid arguments for tool '{tool.name}': {problem}. Fix them and try again."
    return None


def _call_context(context: Any, step: int | None, call_id: str | None = None) -> Any:
    for_call = getattr(context, "for_call", None)
    return for_call(step, call_id) if step is not None and callable(for_call) else context


def _error(toolset: Toolset, message: str) -> ToolResult:
    return ToolResult(prepare(message, toolset.max_output_chars), True)

"""The pure ReAct engine: state, parsing, tool dispatch, budgets. No Django, DB, HTTP or SDK imports."""

from agents.engine.dispatch import Toolset
from agents.engine.loop import EngineError, advance, cancel, decide, resume_calls
from agents.engine.pending import decision_problem, pending_action, pending_actions, pending_calls
from agents.engine.state import RunState
from agents.engine.types import (
    CallStopped,
    HostStop,
    LiveSink,
    ModelError,
    ModelReply,
    ModelRequest,
    Status,
    StopReason,
    ToolCall,
    ToolSpec,
    ToolWaits,
    Usage,
)

__all__ = [
    "CallStopped",
    "EngineError",
    "HostStop",
    "LiveSink",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "RunState",
    "Status",
    "StopReason",
    "ToolCall",
    "ToolSpec",
    "ToolWaits",
    "Toolset",
    "Usage",
    "advance",
    "cancel",
    "decide",
    "decision_problem",
    "pending_action",
    "pending_actions",
    "pending_calls",
    "resume_calls",
]

"""The pure ReAct engine: state, parsing, tool dispatch, budgets. No Django, DB, HTTP or SDK imports."""

from agents.engine.context import RunContext
from agents.engine.dispatch import Toolset
from agents.engine.loop import EngineError, advance, cancel, decide, resume_calls
from agents.engine.pending import decision_problem, pending_action, pending_actions, pending_calls
from agents.engine.state import RunState
from agents.engine.steps import ApprovalStep, ErrorStep, ModelStep, StepKind, SummaryStep, ToolStep
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
    "ApprovalStep",
    "CallStopped",
    "EngineError",
    "ErrorStep",
    "HostStop",
    "LiveSink",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "ModelStep",
    "RunContext",
    "RunState",
    "Status",
    "StepKind",
    "StopReason",
    "SummaryStep",
    "ToolCall",
    "ToolSpec",
    "ToolStep",
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

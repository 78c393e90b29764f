"""A stored run as the checks see it (agents/evals/checks.py `Evidence`), and the graders they call out to."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.evals.checks import Evidence, Graders, ToolUse
from agents.evals.judging import judge_for
from agents.models import Run, StepKind
from agents.providers import KEY_SETTINGS
from memory import embeddings


def evidence_of(run: Run, latency_ms: float | None = None) -> Evidence:
    """What `run` says about itself: its answer, its tool calls in order, its cost (a provider that bills nothing
    costs 0; a model without a price, None), its turns and its latency (`latency_ms` as measured by the caller, else
    from its creation to its last change)."""
    calls = [
        ToolUse(data.get("name", ""), data.get("arguments") or {})
        for data in run.steps.filter(kind=StepKind.TOOL).order_by("index").values_list("data", flat=True)
    ]
    cost = run.cost_nanos
    if cost is None and run.provider not in KEY_SETTINGS:  # the offline demo bills nothing
        cost = 0
    if latency_ms is None:
        latency_ms = max(0.0, (run.updated_at - run.created_at).total_seconds() * 1000)
    return Evidence(
        output=run.output if run.ok else None,
        input=run.input,
        output_json=run.output_json,
        tool_calls=tuple(calls),
        cost_nanos=cost,
        latency_ms=latency_ms,
        turns=run.turns,
    )


def similarity(a: str, b: str) -> float:
    """Cosine similarity of two texts with memory's offline embedding model (its vectors are unit length)."""
    vectors = embeddings.embed([a, b])
    return float(np.dot(vectors[0], vectors[1]))


def graders_for(owner: Any, provider: str, model: str) -> Graders:
    """The judge (its runs owned by `owner`; `provider`/`model` the model under test) and the similarity."""
    return Graders(judge=judge_for(owner, provider, model), similarity=similarity)

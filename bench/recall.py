"""`manage.py bench --only recall`: memory recall by meaning, on the current database.

- latency: recall p50/p95 (limit 5) in text, semantic and hybrid mode for one user holding 1,000 / 10,000 / 100,000
  facts (--sizes), the queries two words of a stored fact as a user would ask;
- cost: `remember` with vectors against without (MEMORY_VECTORS off), on the same database, interleaved;
- quality: recall@1 and recall@3 of each mode on the labelled set memory/benchdata/recall_set.json (queries that
  share no keyword with their fact, and queries that do; and the half hybrid's fusion was tuned on, even indexes,
  against the held-out odd ones).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path

from django.contrib.auth import get_user_model
from django.test.utils import override_settings

from bench.support import Row, _add_facts, _percentiles
from memory import backfill, services, vectors
from memory.models import Fact

LABELLED = Path(__file__).resolve().parents[1] / "memory" / "benchdata" / "recall_set.json"


def measure(progress, sizes: list[int], queries: int) -> list[Row]:
    rows: list[Row] = []
    modes = [services.TEXT, services.SEMANTIC, services.HYBRID] if vectors.available() else [services.TEXT]
    if len(modes) == 1:
        progress(f"  recall: no vector index ({vectors.why_not()}): text mode only")
    rows += _quality(progress, modes)
    rows += _remember_cost(progress)
    return rows + latency_rows(progress, sizes, queries, modes)


def latency_rows(progress, sizes: list[int], queries: int, modes: list[str], name: str = "recall {mode}") -> list[Row]:
    """Recall's p50 and p95 per mode, for one throwaway user holding each of `sizes` facts in turn (`name` names
    the figures: `memory` keeps its own)."""
    rows: list[Row] = []
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    try:
        have = 0
        for size in sorted(sizes):
            progress(f"  recall: storing {size:,} facts …")
            _add_facts(user, size - have, start=have)
            have = size
            if modes != [services.TEXT]:
                backfill.embed_missing(progress=None)
            for mode in modes:
                p50, p95 = _latency(user, queries, mode)
                work = f"recall(limit=5, mode={mode}), {queries} two-word queries, {vectors.kind()} index"
                label = name.format(mode=mode)
                rows.append(Row(f"{label} p50 @ {size:,} facts", p50, "ms", work))
                rows.append(Row(f"{label} p95 @ {size:,} facts", p95, "ms", work))
    finally:
        user.delete()
    return rows


def _latency(user, queries: int, mode: str) -> tuple[float, ...]:
    rnd = random.Random(7)
    texts = list(Fact.objects.filter(owner=user).order_by("?").values_list("text", flat=True)[:queries])
    services.recall(user, "warm up", limit=5, mode=mode)
    samples = []
    for text in texts:
        query = " ".join(rnd.sample(text.split(), 2))
        start = time.perf_counter()
        services.recall(user, query, limit=5, mode=mode)
        samples.append((time.perf_counter() - start) * 1000)
    return _percentiles(samples)


def _remember_cost(progress, facts: int = 300) -> list[Row]:
    """ms per `remember` with vectors and without, interleaved in rounds of 50 on two throwaway users."""
    progress(f"  recall: remembering {facts} facts with and without vectors …")
    users = [get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}") for _ in range(2)]
    took: dict[bool, list[float]] = {True: [], False: []}
    try:
        services.remember(users[0], "warm up the model and the index")
        for start in range(0, facts, 50):
            for on, user in ((True, users[0]), (False, users[1])):
                with override_settings(MEMORY_VECTORS=on):
                    for i in range(start, start + 50):
                        began = time.perf_counter()
                        services.remember(user, f"fact {i}: the user mentioned item {i * 7919 % 10007} today")
                        took[on].append((time.perf_counter() - began) * 1000)
    finally:
        for user in users:
            user.delete()
    with_p50, _ = _percentiles(took[True])
    without_p50, _ = _percentiles(took[False])
    work = f"services.remember, {facts} facts each way, interleaved"
    return [
        Row("remember with vectors p50", with_p50, "ms", work),
        Row("remember without vectors p50", without_p50, "ms", work),
        Row("remember: vectors add (p50)", with_p50 - without_p50, "ms", work),
    ]


def _quality(progress, modes: list[str]) -> list[Row]:
    """recall@1 and @3 of each mode on the labelled set, overall, by whether a query shares a keyword, and by half:
    hybrid's fusion (services.fuse) was tuned on the queries of even index and is checked on the odd ones."""
    data = json.loads(LABELLED.read_text())
    progress(f"  recall: labelled set, {len(data['facts'])} facts, {len(data['queries'])} queries …")
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    queries = data["queries"]
    subsets = {
        "all queries": list(range(len(queries))),
        "no shared keyword": [n for n, q in enumerate(queries) if not q["shares_keyword"]],
        "shared keyword": [n for n, q in enumerate(queries) if q["shares_keyword"]],
        "tuned-on half (even)": list(range(0, len(queries), 2)),
        "held-out half (odd)": list(range(1, len(queries), 2)),
    }
    try:
        ids = {}
        for fact in data["facts"]:
            stored, _ = services.remember(user, fact["text"])
            ids[stored.pk] = fact["id"]
        rows = []
        for mode in modes:
            found = [[ids[f.pk] for f in services.recall(user, q["query"], limit=3, mode=mode)] for q in queries]
            for label, members in subsets.items():
                for k in (1, 3):
                    hits = sum(1 for n in members if set(found[n][:k]) & set(queries[n]["relevant"]))
                    work = f"{len(members)} queries over {len(data['facts'])} facts"
                    rows.append(Row(f"recall@{k} {mode}, {label}", 100 * hits / max(len(members), 1), "%", work))
        return rows
    finally:
        user.delete()

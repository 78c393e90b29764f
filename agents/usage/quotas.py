"""Daily token and spend quotas and usage (docs/api.md#usage; docs/cost.md). Services layer.

Usage is counted per user per UTC day in `DailyUsage`, kept by a database trigger on the run row: the unit's own
commit (its UPDATE of the run's token counters) adds the difference in the same statement, so counting costs no
round trip and never scans a user's runs or steps.

A quota (`AGENT_DAILY_TOKEN_QUOTA`, or the user's `TokenQuota` override) is checked:
- before a run is created or advanced (`check_can_start`: 429 with Retry-After when today's usage has reached it);
- before every model call of a run (`Admission`): a call that would start with the quota used up stops the run with
  `quota_exceeded` after the unit that crossed it. Concurrent runs of one user reserve their next call, each at an
  upper bound of what it can cost (`call_bound`: its request's input, a token per byte, plus its output cap), or at
  the largest single call counted today if that is more: a call is let in only while today's usage, the calls in
  flight and its own reservation fit in the quota, or when none of the user's calls is in flight (so a run is never
  starved); with no call counted today yet, one call at a time. The reservation is given back once the unit's commit
  counted the call's real tokens. So while no call costs more than it reserved, parallel runs overshoot the quota by
  less than one call: the lone call let in with too little room left. A call that does cost more (a provider past
  its cap or counting what its request does not show) raises the largest call seen, which every later call then
  reserves at least.
A reservation expires with the call's own timeout, and goes as soon as another worker takes its run: a worker that
died mid-call (kill -9, a lost machine) leaves a reservation behind, and the run's next holder drops it before its
own first call, so a resumed run never waits on (or stops for) its dead predecessor's call.

A spend quota (`AGENT_DAILY_COST_QUOTA` in AGENT_CURRENCY, or the user's `TokenQuota.daily_cost`) is checked at the
same two places against today's spend (`DailyUsage.cost_nanos`, kept by the same trigger from each run's cost), with
no reservation: a call is let in while today's spend is below the quota. So parallel runs of one user may overshoot
it by the calls they have in flight (a call's price is known only once it has answered).
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from agents.engine import HostStop, ModelRequest, StopReason
from agents.models import DailyUsage, QuotaReservation, TokenQuota
from agents.usage import prices
from agents.usage.owners import OwnerFacts

WAIT_S = 0.2  # between admission attempts while other calls of the user are in flight
SLACK_S = 5.0  # a reservation outlives its call's timeout by this much


class QuotaExceeded(Exception):
    """Today's usage has reached the user's quota: 429 with Retry-After (seconds to the next UTC midnight)."""

    def __init__(self, quota: int, used: int) -> None:
        self.quota, self.used = quota, used
        self.retry_after = seconds_to_midnight()
        super().__init__(f"The {self.used_up(quota, used)}; it resets at 00:00 UTC.")

    @staticmethod
    def used_up(quota: int, used: int) -> str:
        return f"daily token quota of {quota} tokens is used up ({used} used today, UTC)"


class SpendQuotaExceeded(QuotaExceeded):
    """Today's spend has reached the user's spend quota (`quota` and `used` in billionths of AGENT_CURRENCY)."""

    @staticmethod
    def used_up(quota: int, used: int) -> str:
        currency = settings.AGENT_CURRENCY
        return (
            f"daily spend quota of {prices.money_text(quota)} {currency} is used up "
            f"({prices.money_text(used)} {currency} spent today, UTC)"
        )


def today():
    return datetime.now(UTC).date()


def seconds_to_midnight() -> int:
    now = datetime.now(UTC)
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return max(1, int((midnight - now).total_seconds()) + 1)


def daily_quota(override: int | None) -> int:
    """The daily quota (0: none) of a user whose override is `override`: it, else AGENT_DAILY_TOKEN_QUOTA."""
    return int(override if override is not None else settings.AGENT_DAILY_TOKEN_QUOTA)


def quota_for(user_id: int, facts: OwnerFacts | None = None) -> int:
    """The user's daily token quota (0: none), as `quotas_for` reads it."""
    return quotas_for(user_id, facts)[0]


def quotas_for(user_id: int, facts: OwnerFacts | None = None) -> tuple[int, int]:
    """The user's daily token quota and spend quota in billionths (0: none). With their `facts` (read with something
    else) holding both overrides it costs no query; otherwise one statement reads both."""
    if facts is not None and facts.user_id == user_id and facts.cost_read:
        return daily_quota(facts.quota_override), daily_cost_quota(facts.cost_override)
    row = TokenQuota.objects.filter(user_id=user_id).values_list("daily_tokens", "daily_cost").first()
    tokens, cost = row or (None, None)
    return daily_quota(tokens), daily_cost_quota(cost)


def daily_cost_quota(override: Decimal | float | None) -> int:
    """The daily spend quota in billionths (0: none) of a user whose override is `override` (as the ORM or a raw
    statement reads TokenQuota.daily_cost): it, else AGENT_DAILY_COST_QUOTA."""
    if override is None:
        return prices.to_nanos(prices.amount(settings.AGENT_DAILY_COST_QUOTA, "AGENT_DAILY_COST_QUOTA"))
    return prices.to_nanos(prices.amount(override, "TokenQuota.daily_cost"))


def _day(user_id: int, day=None) -> tuple[int, int, int]:
    """(prompt tokens, completion tokens, billionths spent) of the user's runs on `day` (UTC; default today)."""
    row = DailyUsage.objects.filter(owner_id=user_id, day=day or today())
    return row.values_list("prompt_tokens", "completion_tokens", "cost_nanos").first() or (0, 0, 0)


def usage(user_id: int, day=None) -> tuple[int, int]:
    """(prompt, completion) tokens the user's runs used on `day` (UTC; default today)."""
    prompt, completion, _ = _day(user_id, day)
    return prompt, completion


def spent(user_id: int, day=None) -> int:
    """What the user's runs cost on `day` (UTC; default today), in billionths of AGENT_CURRENCY."""
    return _day(user_id, day)[2]


def check_can_start(user_id: int, facts: OwnerFacts | None = None) -> None:
    """Before creating or advancing a run of `user_id`: QuotaExceeded when today's usage has reached the token
    quota, SpendQuotaExceeded when today's spend has reached the spend quota.

    An API request's facts (from its token look-up) hold the overrides and today's usage: then this costs no query.
    """
    facts = facts.about(user_id) if facts is not None else None
    quota, cost_quota = quotas_for(user_id, facts)
    if quota:
        used = _known_today(facts.used_today if facts is not None else None)
        used = sum(usage(user_id)) if used is None else used
        if used >= quota:
            raise QuotaExceeded(quota, used)
    if cost_quota:
        cost = _known_today(facts.spent_today if facts is not None else None)
        cost = spent(user_id) if cost is None else cost
        if cost >= cost_quota:
            raise SpendQuotaExceeded(cost_quota, cost)


def _known_today(fact: tuple | None) -> int | None:
    """A (day, amount) fact's amount when it is today's, else None (not known)."""
    return fact[1] if fact is not None and fact[0] == today() else None


class Admission:
    """One run's gate before each model call (None when the owner has neither quota): under a token quota reserve,
    call, release; under a spend quota check today's spend first."""

    def __init__(
        self, user_id: int, quota: int, deadline: float, run_id: uuid.UUID | None = None, cost_quota: int = 0
    ) -> None:
        self.user_id, self.quota, self.deadline, self.run_id = user_id, quota, deadline, run_id
        self.cost_quota = cost_quota
        self.reservation: uuid.UUID | None = None

    @classmethod
    def for_run(
        cls, owner_id: int, deadline: float, facts: OwnerFacts | None = None, run_id: uuid.UUID | None = None
    ) -> Admission | None:
        """The gate for a run's units in this hold, or None without a quota. A reservation this run already has
        belongs to an earlier holder that never gave it back (each hold gives its own back as it ends): that worker
        died mid-call, so the reservation goes now instead of when its call would have timed out."""
        quota, cost_quota = quotas_for(owner_id, facts)
        if not quota and not cost_quota:
            return None
        if run_id is not None and quota:
            QuotaReservation.objects.filter(run_id=run_id).delete()
        return cls(owner_id, quota, deadline, run_id, cost_quota)

    def enter(self, timeout_s: float, idle=None, request: ModelRequest | None = None) -> None:
        """Wait until this call fits, then reserve it; HostStop when the quota is used up. `idle()` is called before
        each wait (the host hands its database connection back: a waiting run holds none). The call reserves
        `call_bound(request)`, or the largest call counted today if that is more (without a request: only that).
        Under a spend quota, HostStop as well when today's spend has reached it."""
        if self.cost_quota:
            cost = spent(self.user_id)
            if cost >= self.cost_quota:
                raise HostStop(StopReason.QUOTA_EXCEEDED, f"the {SpendQuotaExceeded.used_up(self.cost_quota, cost)}")
        if not self.quota:
            return
        bound = call_bound(request) if request is not None else 0
        while True:
            verdict = self._try(timeout_s, bound)
            if verdict is None:
                return
            if time.time() + WAIT_S >= self.deadline:
                raise HostStop(StopReason.TIMEOUT, "deadline reached while waiting for the daily token quota")
            if idle is not None:
                idle()
            time.sleep(WAIT_S)

    def leave(self) -> None:
        """Give the reservation back: after the unit's commit counted the call's tokens (so they are never neither
        reserved nor counted), or when the run stops."""
        if self.reservation is not None:
            QuotaReservation.objects.filter(pk=self.reservation).delete()
            self.reservation = None

    def _try(self, timeout_s: float, bound: int) -> str | None:
        """None when reserved; "wait" when calls in flight leave no room yet. Raises HostStop when used up.

        The call reserves the larger of `bound` and the largest call counted today (`max_unit`): a call that cost
        more than its own bound makes every later one reserve at least as much. It is let in while usage, the calls
        in flight and it fit in the quota, or when none is in flight (the one call that may overshoot); until a call
        has been counted today, one at a time."""
        now, day = timezone.now(), today()
        with transaction.atomic():  # IMMEDIATE on SQLite; the usage row locked on PostgreSQL: one admission at a time
            row = _locked_usage(self.user_id, day)
            used = row.prompt_tokens + row.completion_tokens
            if used >= self.quota:
                raise HostStop(StopReason.QUOTA_EXCEEDED, f"the {QuotaExceeded.used_up(self.quota, used)}")
            live = QuotaReservation.objects.filter(owner_id=self.user_id, expires_at__gt=now)
            reserved = live.aggregate(n=Sum("tokens"))["n"] or 0
            unit = row.max_unit
            tokens = max(bound, unit, 1)
            if reserved and (not unit or used + reserved + tokens > self.quota):
                return "wait"
            reservation = QuotaReservation.objects.create(
                owner_id=self.user_id,
                tokens=tokens,
                expires_at=now + timedelta(seconds=timeout_s + SLACK_S),
                run_id=self.run_id,
            )
            QuotaReservation.objects.filter(owner_id=self.user_id, expires_at__lte=now).delete()
        self.reservation = reservation.pk
        return None


def call_bound(request: ModelRequest) -> int:
    """An upper bound of the tokens one model call can cost: its input at one token per UTF-8 byte of its messages
    and tool specs as JSON, plus its output cap (`max_output_tokens`, else AGENT_QUOTA_OUTPUT_ESTIMATE).

    A byte-level BPE token (OpenAI's tiktoken, Llama 3's) is at least one byte of text, a SentencePiece one at
    least one character; the JSON's keys and punctuation (~30 bytes a message) outweigh a chat format's few tokens per
    message, and English text is ~4 bytes a token, which leaves room for a provider's own hidden prompt. Costs one
    `json.dumps` of the request (C code), only for a user with a quota."""
    tools = [(spec.name, spec.description, spec.parameters) for spec in request.tools]
    text = json.dumps([request.messages, tools], ensure_ascii=False, separators=(",", ":"), default=str)
    size = len(text) if text.isascii() else len(text.encode())
    cap = request.max_output_tokens
    return size + (cap if cap is not None else settings.AGENT_QUOTA_OUTPUT_ESTIMATE)


def _locked_usage(user_id: int, day) -> DailyUsage:
    rows = DailyUsage.objects.select_for_update().filter(owner_id=user_id, day=day)
    row = rows.first()
    if row is None:
        try:
            with transaction.atomic():
                DailyUsage.objects.create(owner_id=user_id, day=day)
        except IntegrityError:
            pass  # created meanwhile by a commit's trigger or another admission
        row = rows.get()
    return row


def usage_report(user) -> dict:
    """`GET /api/v1/usage`: today's tokens and spend, each against its quota (null: none)."""
    prompt, completion, cost = _day(user.pk)
    quota, cost_quota = quotas_for(user.pk)
    total = prompt + completion
    return {
        "day": today().isoformat(),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
        "quota": quota or None,
        "remaining": max(quota - total, 0) if quota else None,
        "cost": prices.cost_text(cost),
        "cost_quota": prices.cost_text(cost_quota) if cost_quota else None,
        "cost_remaining": prices.cost_text(max(cost_quota - cost, 0)) if cost_quota else None,
        "currency": settings.AGENT_CURRENCY,
    }

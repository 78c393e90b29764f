"""What the quota gate and the notifications need to know about a run's owner, when it was read with something else.

The API's token look-up (agents/api/authentication.py) reads the user's daily-quota override, today's usage and
whether they have a webhook in the same statement as the user; a worker's claim of a run (agents/runs/persist.py)
reads the override and the webhook flag in the same statement as the run. Either gives an `OwnerFacts`, which the
services take as an explicit argument (`facts=`): with it a quota check or a finished run's notification costs no
query; without it (None) each reads what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal


@dataclass(frozen=True, slots=True)
class OwnerFacts:
    user_id: int
    quota_override: int | None  # the user's own daily token quota (TokenQuota); None: the server's default applies
    has_webhooks: bool  # whether the user has registered any webhook
    used_today: tuple[date, int] | None = None  # (UTC day, tokens used that day) when read; None: not known
    # The spend quota's facts, when the reader read them (`cost_read`): the user's own daily spend quota
    # (TokenQuota.daily_cost; None: the server's default applies) and (UTC day, billionths spent that day). Without
    # them the spend check reads them itself (agents.usage.quotas).
    cost_read: bool = False
    cost_override: Decimal | float | None = None  # as the statement read it (SQLite: a float)
    spent_today: tuple[date, int] | None = None

    def about(self, user_id: int) -> OwnerFacts | None:
        """These facts when they are `user_id`'s, else None (an actor who is not the run's owner)."""
        return self if self.user_id == user_id else None

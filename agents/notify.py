"""Telling people about a run: reviewers by e-mail when it starts waiting, the owner's webhooks (API.md v1.1).

Called by the services after the commit that changed the run's status, never inside a transaction.
(Being built: the delivery lives in the task worker.)
"""

from __future__ import annotations


def run_awaiting_approval(run) -> None:
    """The run has just started waiting for a decision (its pending calls are committed)."""


def run_done(run) -> None:
    """The run has just finished (called once per run, by the commit that made it done)."""

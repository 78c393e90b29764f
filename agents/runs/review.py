"""A human's decisions on a paused run (approve, edit, deny; one call or a batch), the system's denial of calls
whose approval time ran out, and advancing a run one step at a time.
"""

from __future__ import annotations

import logging

from django.utils import timezone

from agents import engine, periodic
from agents.errors import InvalidRequest, NotAllowed, RunBusy, RunFinished
from agents.models import Run, RunMode, RunStatus
from agents.permissions import can_decide
from agents.runs import drive, leases, tree
from agents.usage import quotas
from agents.usage.owners import OwnerFacts

log = logging.getLogger(__name__)


def advance_run(
    *,
    run_id,
    actor,
    approval: bool | None = None,
    arguments=None,
    reason: str | None = None,
    decisions: list[dict] | None = None,
    owner_id: int | None = None,
    facts: OwnerFacts | None = None,
) -> Run:
    """The API's advance: one unit for a running run; a decision (then continue per mode) when paused.

    Over the run owner's daily token quota: QuotaExceeded (429) before anything is recorded or called. `owner_id`
    (the caller read the run) spares a read, `facts` (what the request read about the actor with its
    credentials) the quota's.
    """
    _check_quota(run_id, owner_id, facts)
    if approval is not None or decisions is not None:  # a decision: for a paused run only, never a plain step
        return decide_approval(
            run_id=run_id,
            actor=actor,
            approved=approval,
            arguments=arguments,
            reason=reason,
            decisions=decisions,
            facts=facts,
        )
    return _one_step(run_id, facts)


def _check_quota(run_id, owner_id: int | None, facts: OwnerFacts | None) -> None:
    """QuotaExceeded when the run's owner is over their daily quota (a run that is gone is left to what follows)."""
    if owner_id is None:
        owner_id = Run.objects.filter(pk=run_id).values_list("owner_id", flat=True).first()
    if owner_id is not None:
        quotas.check_can_start(owner_id, facts)


def _one_step(run_id, facts: OwnerFacts | None) -> Run:
    """One unit of a running run; a paused run needs a decision instead (InvalidRequest)."""
    try:
        return drive.execute(run_id=run_id, units=drive.ONE_STEP, facts=facts)
    except RunBusy as exc:
        if exc.status != RunStatus.AWAITING_APPROVAL:
            raise
    raise InvalidRequest({"approval": ["This run is awaiting approval: send approval true or false, or decisions."]})


def decide_approval(
    *,
    run_id,
    actor,
    approved: bool | None = None,
    arguments=None,
    reason: str | None = None,
    decisions: list[dict] | None = None,
    continue_run: bool = False,
    facts: OwnerFacts | None = None,
) -> Run:
    """Record a reviewer's decisions on pending calls; the run then continues as its mode says.

    `decisions` (`[{"call_id", "approved", "arguments"?, "reason"?}]`) decides several calls of the paused reply at
    once, all or nothing; without it, `approved`/`arguments`/`reason` decide the first pending call.
    `continue_run` (the admin console) drives any run on until it pauses again or stops.
    """
    run = Run.objects.get(pk=run_id)
    _check_decidable(actor, run)
    leaf = tree.paused_leaf(run) if tree.is_mirrored(run) else None
    if leaf is not None:  # the run shows a child's pause: the decision is the child's, and the run goes on after it
        return _decide_for_child(
            run,
            leaf,
            continue_run,
            dict(actor=actor, approved=approved, arguments=arguments, reason=reason, decisions=decisions, facts=facts),
        )
    decision = _decision(actor, approved, arguments, reason, decisions)
    units = _units_after_decision(run, continue_run)
    return drive.work(run_id, statuses=[RunStatus.AWAITING_APPROVAL], units=units, decision=decision, facts=facts)


def _check_decidable(actor, run: Run) -> None:
    """NotAllowed unless `actor` may decide for the run; RunFinished or RunBusy unless it is awaiting approval."""
    if not can_decide(actor, run):
        raise NotAllowed("You may not decide approvals for this run.")
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise (
            RunFinished("The run is not awaiting approval.")
            if run.status == RunStatus.DONE
            else RunBusy("The run is not awaiting approval.", status=run.status)
        )


def _decision(actor, approved: bool | None, arguments, reason: str | None, decisions: list[dict] | None) -> dict:
    """The decision as the drive applies it: a batch of per-call decisions (one, for the first pending call, without
    `decisions`), who made it, and the request field a refused one is reported under."""
    if decisions is None:
        if approved is None:
            raise InvalidRequest({"approval": ["Send approval true or false, or decisions."]})
        batch, field = [{"call_id": None, "approved": approved, "arguments": arguments, "reason": reason}], "arguments"
    else:
        batch, field = [dict(d) for d in decisions], "decisions"
    return {"decisions": batch, "reviewer": actor.get_username(), "field": field}


def _units_after_decision(run: Run, continue_run: bool) -> int | None:
    """How far the decision's drive goes: a sync run (and, from the console, any run but a background one) on until
    it stops; otherwise the decision is only recorded here."""
    background = run.mode == RunMode.BACKGROUND
    return drive.UNTIL_STOPPED if (run.mode == RunMode.SYNC or (continue_run and not background)) else drive.RECORD_ONLY


def _decide_for_child(run: Run, leaf: Run, continue_run: bool, decision: dict) -> Run:
    """A decision sent to a run that shows its descendant's pause is that descendant's. A sync run (or, from the
    console, a step run) then goes on here, as after a decision of its own: the runs between it and the child are
    left to it (a child's end would queue them), and its repeated calls find their children's answers."""
    here = run.mode == RunMode.SYNC or (continue_run and run.mode == RunMode.STEP)
    chain = []
    for ancestor in tree.ancestors(leaf) if here else []:
        chain.append(ancestor)
        if ancestor == run.pk:
            break
    with tree.taking_up(chain):
        decide_approval(run_id=leaf.pk, continue_run=continue_run, **decision)
    if here:
        try:
            return drive.execute(run_id=run.pk, facts=decision["facts"])
        except (RunBusy, RunFinished):
            pass  # the child's pause came back, or the run was cancelled meanwhile
    return Run.objects.get(pk=run.pk)


EXPIRED = "expired"


def expire_approvals(*, run_id) -> bool:
    """Deny, as the system (`reviewer: null`, `reason: "expired"`), every call of a paused run whose time is up; the
    run then goes on as after a denial: queued for a worker (a sync run, whose caller is gone, as a background run),
    a step run left for its client. False when there was nothing to expire (decided meanwhile, or not yet due).

    Takes the run's lease as a decision does, so of a decision racing the expiry and the expiry exactly one is
    recorded (the other finds the run no longer awaiting, or busy, and records nothing).
    """
    try:
        held = drive.hold(run_id, [RunStatus.AWAITING_APPROVAL])
    except (RunBusy, RunFinished, Run.DoesNotExist):
        return False
    try:
        expires = held.run.approval_expires_at
        if expires is None or expires > timezone.now():
            return False
        waiting = engine.pending_actions(held.state)
        decisions = [{"call_id": a["call_id"], "approved": False, "reason": EXPIRED} for a in waiting]
        drive.apply_decision(held, {"decisions": decisions, "reviewer": None, "record_only": True}, last=True)
    finally:
        leases.drop(held.token)
        if not held.released:
            leases.release(held.run.pk, held.token)
    if held.state.status == RunStatus.RUNNING:
        drive.continue_elsewhere(held.run)
    return True


@periodic.every("approvals", lambda: leases.lease_s() / 3)
def sweep_expired_approvals(limit: int = 100) -> int:
    """A sweep (agents/periodic.py): expire every paused run whose calls' time is up (oldest first). How many
    expired."""
    due = Run.objects.filter(status=RunStatus.AWAITING_APPROVAL, approval_expires_at__lte=timezone.now())
    ids = list(due.order_by("approval_expires_at").values_list("pk", flat=True)[:limit])
    return sum(expire_approvals(run_id=run_id) for run_id in ids)

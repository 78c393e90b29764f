"""What a run's commits tell the rest of the service: the run has just finished, or has just started waiting for a
decision; and that a run was let go waiting on a child run (agents/runs/children.py takes it up when the child is
done). Sent once per change, after its commit (outside any transaction); `run` is the run as committed, `facts`
its owner's facts when the sender has them (else None). Observers listen (connected in agents/apps.py): the
notifications (webhooks, reviewer e-mail) and the metrics, so the runs never import what tells about them.

`run_done` is sent by a run's settle step (agents/runs/settle.py), before the continuations that follow a run's end;
those are called there, in sight, not connected to the signal.
"""

from __future__ import annotations

from django.dispatch import Signal

run_done = Signal()  # kwargs: run, facts
run_awaiting_approval = Signal()  # kwargs: run, facts

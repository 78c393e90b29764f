"""What a run's commits tell the rest of the service: the run has just finished, or has just started waiting for a
decision; and that a run was let go waiting on a child run (agents/runs/children.py takes it up when the child is
done). Sent once per change, after its commit (outside any transaction); `run` is the run as committed, `owner`
its owner's user object when the sender has it (else None). The notifications (webhooks, reviewer e-mail) listen
(connected in agents/apps.py), so the runs never import what tells about them.
"""

from __future__ import annotations

from django.dispatch import Signal

run_done = Signal()  # kwargs: run, facts
run_awaiting_approval = Signal()  # kwargs: run, facts
run_waiting = Signal()  # kwargs: run, child_id: a unit ended waiting on a child run, and the run is let go

"""The cancel-selected action and the admin index panel (runs by status over 24 h, count waiting for approval)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.utils import timezone

from agents.models import Run
from tests.conftest import make_user
from tests.console.conftest import RUNS, logged_in, start_and_pause, stored_run

pytestmark = pytest.mark.django_db


def cancel(client, *runs):
    return client.post(RUNS, {"action": "cancel_runs", "_selected_action": [str(r.pk) for r in runs]})


def test_cancel_selected_runs(superuser, alice, bob):
    running = stored_run(alice, status="running", stop_reason=None, output=None)
    queued = stored_run(bob, status="queued", stop_reason=None, output=None, mode="background")
    awaiting = start_and_pause(alice)
    finished = stored_run(alice, output="85")
    untouched = stored_run(bob, status="running", stop_reason=None, output=None)
    client = logged_in(superuser)
    html = client.get(RUNS).content.decode()
    assert 'value="cancel_runs"' in html and "Cancel selected runs" in html
    response = cancel(client, running, queued, awaiting, finished)
    assert response.status_code == 302
    assert "Cancelled 3 run(s)." in [str(m) for m in get_messages(response.wsgi_request)]
    for run in (running, queued, awaiting):
        run.refresh_from_db()
        assert (run.status, run.stop_reason, run.output) == ("done", "cancelled", None)
    finished.refresh_from_db()
    assert (finished.status, finished.stop_reason, finished.output) == ("done", "final_answer", "85")
    untouched.refresh_from_db()
    assert untouched.status == "running"


def test_cancelled_run_shows_in_the_list_filter(superuser, alice):
    running = stored_run(alice, status="running", stop_reason=None, output=None)
    client = logged_in(superuser)
    cancel(client, running)
    found = client.get(RUNS, {"stop_reason": "cancelled"}).context["cl"].result_list
    assert [r.pk for r in found] == [running.pk]


def test_cancel_stops_a_paused_run_for_good(superuser, reviewer, alice, ddg):
    run = start_and_pause(alice)
    cancel(logged_in(superuser), run)
    response = logged_in(reviewer).post(f"{RUNS}{run.pk}/decide/", {"decision": "approve"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("done", "cancelled")
    assert ddg.requests == []
    html = logged_in(reviewer).get(f"{RUNS}{run.pk}/change/").content.decode()
    assert 'id="pending-approval"' not in html


# --- the index panel --------------------------------------------------------------------------------------------------


def panel(html: str) -> dict[str, int]:
    block = re.search(r'<div class="module" id="run-dashboard">(.*?)</div>', html, re.S)
    assert block, "no run dashboard on the admin index"
    rows = re.findall(r'<th scope="row">([^<]+)</th><td>(\d+)</td>', block.group(1))
    return {label.strip().lower(): int(count) for label, count in rows}


def awaiting_count(html: str) -> int:
    return int(re.search(r'<strong id="awaiting-count">(\d+)</strong>', html).group(1))


def test_index_panel_counts_runs_by_status_over_24h(superuser, alice, bob):
    for _ in range(3):
        stored_run(alice)  # done
    stored_run(bob, status="running", stop_reason=None, output=None)
    stored_run(bob, status="queued", stop_reason=None, output=None)
    start_and_pause(alice)
    old_done = stored_run(alice)
    old_waiting = start_and_pause(bob)
    two_days_ago = timezone.now() - timedelta(days=2)
    Run.objects.filter(pk__in=[old_done.pk, old_waiting.pk]).update(created_at=two_days_ago)
    response = logged_in(superuser).get("/admin/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Runs in the last 24 hours" in html
    assert panel(html) == {"queued": 1, "running": 1, "awaiting approval": 1, "done": 3}
    assert awaiting_count(html) == 2  # waiting now, however old
    assert "/admin/agents/pendingapproval/" in html


def test_index_panel_with_no_runs(superuser):
    html = logged_in(superuser).get("/admin/").content.decode()
    assert panel(html) == {"queued": 0, "running": 0, "awaiting approval": 0, "done": 0}
    assert awaiting_count(html) == 0


def test_index_panel_for_reviewers_and_viewers(reviewer, staff_viewer, alice):
    start_and_pause(alice)
    for user in (reviewer, staff_viewer):
        html = logged_in(user).get("/admin/").content.decode()
        assert awaiting_count(html) == 1, user.username


def test_index_panel_hidden_from_staff_who_may_not_see_runs(alice):
    start_and_pause(alice)
    html = logged_in(make_user("sam", staff=True)).get("/admin/").content.decode()
    assert 'id="run-dashboard"' not in html


def test_reviewer_may_cancel(reviewer, alice):
    running = stored_run(alice, status="running", stop_reason=None, output=None)
    cancel(logged_in(reviewer), running)
    running.refresh_from_db()
    assert (running.status, running.stop_reason) == ("done", "cancelled")


def test_view_only_staff_cannot_cancel(staff_viewer, alice):
    running = stored_run(alice, status="running", stop_reason=None, output=None)
    client = logged_in(staff_viewer)
    assert 'value="cancel_runs"' not in client.get(RUNS).content.decode()
    cancel(client, running)
    running.refresh_from_db()
    assert running.status == "running"

"""GET /api/v1/runs/{id}/events: server-sent events of a run's steps, status changes and a last `done`."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection

from agents.runs import drive
from tests.api.conftest import RUNS, create_run
from tests.conftest import client_for, make_user


def parse(stream: bytes) -> list[dict]:
    """SSE frames as dicts: {"id", "event", "data"} (comments skipped)."""
    frames = []
    for block in stream.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            frames.append({"id": fields.get("id"), "event": fields["event"], "data": json.loads(fields["data"])})
    return frames


def read(response) -> list[dict]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    return parse(b"".join(response.streaming_content))


def test_replays_every_step_then_the_run_then_done(api):
    run = create_run(api).json()
    frames = read(api.get(f"{RUNS}/{run['id']}/events", HTTP_ACCEPT="text/event-stream"))
    steps = [f for f in frames if f["event"] == "step"]
    assert [f["id"] for f in steps] == ["0", "1", "2", "3", "4"]
    assert [f["data"]["index"] for f in steps] == [0, 1, 2, 3, 4]
    assert steps[1]["data"]["output"] == "84"
    assert [f["event"] for f in frames[5:]] == ["run", "done"]
    assert frames[-1]["data"]["output"] == "85" and frames[-1]["data"]["status"] == "done"


def test_last_event_id_resumes_after_that_index(api):
    run = create_run(api).json()
    frames = read(api.get(f"{RUNS}/{run['id']}/events/", HTTP_LAST_EVENT_ID="3"))
    assert [f["id"] for f in frames if f["event"] == "step"] == ["4"]


def test_garbage_last_event_id_replays_everything(api):
    run = create_run(api).json()
    frames = read(api.get(f"{RUNS}/{run['id']}/events", HTTP_LAST_EVENT_ID="x"))
    assert len([f for f in frames if f["event"] == "step"]) == 5


@pytest.mark.parametrize("header", ["²", "٣", "-1", "1e3", "3.0", " ", "9" * 40])
def test_a_last_event_id_that_is_not_a_plain_ascii_index_replays_everything(api, header):
    """ "²".isdigit() is true but int("²") raises: that was a 500 (issue 10.9)."""
    run = create_run(api).json()
    frames = read(api.get(f"{RUNS}/{run['id']}/events", HTTP_LAST_EVENT_ID=header))
    assert [f["id"] for f in frames if f["event"] == "step"] == ["0", "1", "2", "3", "4"]


def test_another_users_run_is_404_and_unauthenticated_is_401(api, bob):
    run = create_run(api).json()
    assert client_for(bob).get(f"{RUNS}/{run['id']}/events").status_code == 404
    from rest_framework.test import APIClient

    assert APIClient().get(f"{RUNS}/{run['id']}/events").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_live_steps_arrive_as_another_worker_advances_the_run():
    user = make_user("streamer")
    api = client_for(user)
    run = create_run(api, mode="step").json()  # one unit done: steps 0 and 1, still running

    def finish_later() -> None:
        time.sleep(0.5)
        try:
            drive.execute(run_id=run["id"])
        finally:
            connection.close()

    worker = threading.Thread(target=finish_later)
    worker.start()
    frames = read(api.get(f"{RUNS}/{run['id']}/events"))
    worker.join()
    events = [f["event"] for f in frames]
    assert [f["data"]["index"] for f in frames if f["event"] == "step"] == [0, 1, 2, 3, 4]
    # the stream saw the run running first (after the replayed steps), then done
    assert events.index("run") == 2 and frames[2]["data"]["status"] == "running"
    assert events[-2:] == ["run", "done"] and frames[-1]["data"]["output"] == "85"


@pytest.mark.parametrize("accept", ["text/event-stream", "application/json", "*/*", "text/html"])
def test_errors_of_the_stream_are_json_and_labelled_so(api, accept):
    """A stream that cannot start answers like the run's own route: the same status and JSON error body, labelled
    `application/json` (it was labelled `text/event-stream`, which an SSE client reads as a broken stream and a JSON
    client refuses). A 404 for someone else's or no run, a 401 without a token, a 406 for an Accept neither serves."""
    from rest_framework.test import APIClient

    missing = "00000000-0000-0000-0000-000000000000"
    seen = set()
    for client in (api, APIClient()):
        response = client.get(f"{RUNS}/{missing}/events", HTTP_ACCEPT=accept)
        # the run's own route serves JSON only: it is the comparison for everything but an Accept neither serves
        detail = client.get(f"{RUNS}/{missing}", HTTP_ACCEPT=accept if accept == "text/html" else "application/json")
        assert response.status_code == detail.status_code
        assert response["Content-Type"] == detail["Content-Type"] == "application/json"
        assert json.loads(response.content) == detail.json() and detail.json()["detail"]
        seen.add(response.status_code)
    assert seen == ({406} if accept == "text/html" else {404, 401})

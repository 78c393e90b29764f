"""Threads in the admin: the list (bounded queries), the read-only page with its runs in order, links both ways
between a thread and its runs, who may see them, and deleting a thread with its runs through the service."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Run, Step, Thread
from tests.conftest import make_user
from tests.console.conftest import ARITHMETIC, RUNS, grant, logged_in, model_step, run_page, stored_run, tool_step

pytestmark = pytest.mark.django_db

THREADS = "/admin/agents/thread/"
SCRIPT = "<script>alert(1)</script>"
SCRIPT_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def thread_page(thread) -> str:
    return f"{THREADS}{thread.pk}/change/"


def make_thread(owner, title: str = "", *, runs: int = 0) -> Thread:
    thread = Thread.objects.create(owner=owner, title=title)
    for n in range(runs):
        stored_run(owner, thread=thread, input=f"{title or 'untitled'} question {n}", output=f"answer {n}")
    return thread


def listed(response) -> list:
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def row_of(html: str, text: str) -> str:
    rows = re.findall(r"<tr[^>]*>.*?</tr>", html, re.S)
    matching = [r for r in rows if text in r]
    assert len(matching) == 1, (text, len(matching))
    return matching[0]


def cell(row: str, column: str) -> str:
    return re.search(rf'<t[dh] class="field-{column}[^"]*">(.*?)</t[dh]>', row, re.S).group(1)


# --- the list -------------------------------------------------------------------------------------------------------


def test_list_shows_title_or_short_id_owner_run_count_and_updated_at(superuser, alice, bob):
    trip = make_thread(alice, "Trip planning", runs=3)
    untitled = make_thread(bob, runs=1)
    empty = make_thread(alice, "Nothing asked yet")
    response = logged_in(superuser).get(THREADS)
    assert {t.pk for t in listed(response)} == {trip.pk, untitled.pk, empty.pk}
    html = response.content.decode()
    for column in ("name", "owner", "run_count", "updated_at"):
        assert f"column-{column}" in html, column
    trip_row = row_of(html, "Trip planning")
    assert ">Trip planning</a>" in trip_row  # the title links to the thread's page
    assert cell(trip_row, "owner") == "alice"
    assert cell(trip_row, "run_count") == "3"
    assert cell(trip_row, "updated_at").strip()
    untitled_row = row_of(html, str(untitled.pk)[:8])
    assert f">{str(untitled.pk)[:8]}</a>" in untitled_row
    assert (cell(untitled_row, "owner"), cell(untitled_row, "run_count")) == ("bob", "1")
    assert cell(row_of(html, "Nothing asked yet"), "run_count") == "0"
    assert f'href="{thread_page(trip)}"' in html


def test_list_is_most_recently_used_first(superuser, alice):
    old, new = make_thread(alice, "old one", runs=1), make_thread(alice, "new one", runs=1)
    Thread.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(days=2))
    assert [t.pk for t in listed(logged_in(superuser).get(THREADS))] == [new.pk, old.pk]


@pytest.mark.parametrize(("query", "expected"), [("trip", {"trip"}), ("BOB", {"paris"}), ("alice", {"trip", "tea"})])
def test_search_by_title_and_owner(superuser, alice, bob, query, expected):
    threads = {"trip": make_thread(alice, "Trip planning"), "tea": make_thread(alice, "Tea"), "paris": make_thread(bob)}
    response = logged_in(superuser).get(THREADS, {"q": query})
    assert {t.pk for t in listed(response)} == {threads[name].pk for name in expected}


def test_filter_by_owner(superuser, alice, bob):
    mine, theirs = make_thread(alice, "mine"), make_thread(bob, "theirs")
    make_user("nobody")
    client = logged_in(superuser)
    html = client.get(THREADS).content.decode()
    filters = html[html.index('id="changelist-filter"') :]
    assert "alice" in filters and "bob" in filters and "nobody" not in filters  # owners only
    assert [t.pk for t in listed(client.get(THREADS, {"owner__id__exact": alice.pk}))] == [mine.pk]
    assert [t.pk for t in listed(client.get(THREADS, {"owner__id__exact": bob.pk}))] == [theirs.pk]


def test_list_queries_do_not_grow_with_the_threads(superuser, alice):
    client = logged_in(superuser)
    make_thread(alice, "first", runs=2)
    client.get(THREADS)  # warm up (session, content types)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(THREADS).status_code == 200
        return len(captured)

    one = queries()
    for n in range(6):
        make_thread(make_user(f"owner{n}"), f"thread {n}", runs=n % 3 + 1)
    assert len(listed(client.get(THREADS))) == 7
    assert queries() == one


def test_list_escapes_titles(superuser, alice):
    make_thread(alice, SCRIPT, runs=1)
    html = logged_in(superuser).get(THREADS).content.decode()
    assert SCRIPT not in html and SCRIPT_ESCAPED in html


# --- the thread's page -----------------------------------------------------------------------------------------------


def runs_in_order(owner, thread) -> list[Run]:
    """Three runs of a thread, inserted out of order: the page must sort them by when they were created."""
    now = timezone.now()
    second = stored_run(owner, thread=thread, input="now divide that by 5", output="17")
    first = stored_run(owner, thread=thread, input=ARITHMETIC, output="85")
    third = stored_run(owner, thread=thread, input="and add 2", output=None, stop_reason="max_turns")
    for minutes, run in ((3, first), (2, second), (1, third)):
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(minutes=minutes))
    return [first, second, third]


def test_page_lists_the_runs_oldest_first_with_links(superuser, alice):
    thread = make_thread(alice, "Arithmetic")
    runs = runs_in_order(alice, thread)
    other = stored_run(alice, input="a run of no thread")
    response = logged_in(superuser).get(thread_page(thread))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Runs (3), oldest first" in html
    rows = re.findall(r'<tr class="thread-run" id="thread-run-\d+">(.*?)</tr>', html, re.S)
    assert len(rows) == 3
    for row, run in zip(rows, runs, strict=True):
        assert f'href="{run_page(run)}"' in row  # its trace is one click away
        assert f">{str(run.pk)[:8]}</a>" in row
        assert "done" in re.search(r'class="run-status">(.*?)</td>', row, re.S).group(1)
    assert re.search(r'class="run-input">(.*?)</pre>', rows[0]).group(1) == ARITHMETIC
    assert re.search(r'class="run-output">(.*?)</pre>', rows[0]).group(1) == "85"
    assert re.search(r'class="run-input">(.*?)</pre>', rows[1]).group(1) == "now divide that by 5"
    assert re.search(r'class="run-output">(.*?)</pre>', rows[1]).group(1) == "17"
    assert "done / max_turns" in rows[2]
    assert re.search(r'class="run-output quiet">— max_turns</span>', rows[2])  # no answer: the stop reason
    assert "Arithmetic" in html and "alice" in html
    assert run_page(other) not in html


def test_page_of_a_real_conversation(superuser, alice):
    """Three demo runs continuing one thread, through the services: the page reads as the conversation."""
    from agents.runs import drive, submit

    thread = submit.create_thread(owner=alice)
    for goal in (ARITHMETIC, "now divide that by 5", "and add 2"):
        run = submit.start_run(owner=alice, options=submit.RunOptions(input=goal, thread_id=thread.pk))
        assert drive.execute(run_id=run.pk).status == "done"
    html = logged_in(superuser).get(thread_page(thread)).content.decode()
    outputs = re.findall(r'<pre class="run-output">(.*?)</pre>', html, re.S)
    assert outputs == ["85", "17", "19"]
    inputs = re.findall(r'<pre class="run-input">(.*?)</pre>', html, re.S)
    assert inputs == [ARITHMETIC, "now divide that by 5", "and add 2"]
    assert "Runs (3), oldest first" in html


def test_page_without_runs(superuser, alice):
    html = logged_in(superuser).get(thread_page(make_thread(alice, "quiet"))).content.decode()
    assert "Runs (0), oldest first" in html and "No runs yet." in html


def test_page_queries_do_not_grow_with_the_runs(superuser, alice):
    client = logged_in(superuser)
    thread = make_thread(alice, "long", runs=1)
    client.get(thread_page(thread))

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(thread_page(thread)).status_code == 200
        return len(captured)

    one = queries()
    for n in range(8):
        stored_run(alice, thread=thread, input=f"more {n}")
    assert queries() == one


def test_page_is_read_only(superuser, alice):
    thread = make_thread(alice, "keep me", runs=1)
    client = logged_in(superuser)
    assert client.get(f"{THREADS}add/").status_code == 403
    html = client.get(thread_page(thread)).content.decode()
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    assert f"{THREADS}add/" not in client.get(THREADS).content.decode()
    assert client.post(thread_page(thread), {"title": "changed", "owner": alice.pk}).status_code == 403
    thread.refresh_from_db()
    assert thread.title == "keep me"


def test_page_escapes_user_text(superuser, alice):
    thread = make_thread(alice, SCRIPT)
    stored_run(alice, thread=thread, input=f"ask {SCRIPT}", output=f"answer <b>bold</b> {SCRIPT}")
    html = logged_in(superuser).get(thread_page(thread)).content.decode()
    assert SCRIPT not in html and "<b>bold</b>" not in html
    assert f"ask {SCRIPT_ESCAPED}" in html and f"answer &lt;b&gt;bold&lt;/b&gt; {SCRIPT_ESCAPED}" in html


def test_unknown_thread_is_not_a_server_error(superuser):
    client = logged_in(superuser)
    assert client.get(f"{THREADS}{uuid.uuid4()}/change/").status_code in (302, 404)
    assert client.get(f"{THREADS}not-a-uuid/change/").status_code in (302, 404)


# --- from a run to its thread ---------------------------------------------------------------------------------------


def test_run_page_links_its_thread(superuser, alice):
    thread = make_thread(alice, "Trip planning")
    run = stored_run(alice, thread=thread, input="where to?")
    html = logged_in(superuser).get(run_page(run)).content.decode()
    link = re.search(r'<a href="([^"]+)" id="thread-link">(.*?)</a>', html)
    assert link and link.groups() == (thread_page(thread), "Trip planning")


def test_run_page_of_an_untitled_thread_names_it_by_short_id(superuser, alice):
    thread = make_thread(alice)
    run = stored_run(alice, thread=thread)
    html = logged_in(superuser).get(run_page(run)).content.decode()
    assert re.search(rf'id="thread-link">{str(thread.pk)[:8]}</a>', html)


def test_run_page_without_a_thread_has_no_thread_link(superuser, alice):
    html = logged_in(superuser).get(run_page(stored_run(alice))).content.decode()
    assert 'id="run-thread"' not in html and "thread-link" not in html


def test_run_page_names_the_thread_without_a_link_for_who_may_not_open_it(staff_viewer, alice):
    """view_run without view_thread: the run page says which thread, but does not link to a page that refuses."""
    thread = make_thread(alice, "Trip planning")
    html = logged_in(staff_viewer).get(run_page(stored_run(alice, thread=thread))).content.decode()
    assert 'id="run-thread"' in html and "Trip planning" in html
    assert "thread-link" not in html and thread_page(thread) not in html


def test_run_list_shows_the_thread_title(superuser, alice):
    thread = make_thread(alice, "Trip planning")
    in_thread, alone = stored_run(alice, thread=thread, input="where to?"), stored_run(alice, input="alone")
    html = logged_in(superuser).get(RUNS).content.decode()
    assert "column-thread_title" in html
    assert cell(row_of(html, str(in_thread.pk)[:8]), "thread_title") == "Trip planning"
    assert cell(row_of(html, str(alone.pk)[:8]), "thread_title") == "—"


def test_run_list_queries_do_not_grow_with_threads(superuser, alice):
    client = logged_in(superuser)
    stored_run(alice, thread=make_thread(alice, "t0"))
    client.get(RUNS)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(RUNS).status_code == 200
        return len(captured)

    one = queries()
    for n in range(5):
        stored_run(alice, thread=make_thread(alice, f"t{n + 1}"))
    assert queries() == one


# --- who may see threads --------------------------------------------------------------------------------------------


def test_staff_without_permission_cannot_see_threads(alice):
    thread = make_thread(alice, "private", runs=1)
    mallory = make_user("mallory", staff=True)  # staff, not a reviewer, not the owner
    client = logged_in(mallory)
    assert client.get(THREADS).status_code == 403
    assert client.get(thread_page(thread)).status_code == 403
    assert "/admin/agents/thread/" not in client.get("/admin/").content.decode()


def test_view_thread_alone_is_not_enough(alice):
    """The page shows the runs: without the right to see runs, the thread stays hidden too."""
    thread = make_thread(alice, "private", runs=1)
    viewer = grant(make_user("tina", staff=True), "view_thread")
    assert logged_in(viewer).get(thread_page(thread)).status_code == 403


def test_the_owner_needs_staff_too(alice):
    thread = make_thread(alice, "mine", runs=1)
    response = logged_in(alice).get(thread_page(thread))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_reviewers_may_view_but_not_delete(reviewer, alice):
    thread = make_thread(alice, "reviewed", runs=2)
    client = logged_in(reviewer)
    assert [t.pk for t in listed(client.get(THREADS))] == [thread.pk]
    html = client.get(thread_page(thread)).content.decode()
    for run in Run.objects.filter(thread=thread):
        assert run_page(run) in html
    assert f"{THREADS}{thread.pk}/delete/" not in html
    assert client.post(f"{THREADS}{thread.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Thread.objects.filter(pk=thread.pk).exists()
    assert "/admin/agents/thread/" in client.get("/admin/").content.decode()


def test_viewer_with_both_view_permissions_sees_threads(alice):
    thread = make_thread(alice, "shared", runs=1)
    viewer = grant(make_user("tina", staff=True), "view_thread", "view_run")
    client = logged_in(viewer)
    assert [t.pk for t in listed(client.get(THREADS))] == [thread.pk]
    assert client.get(thread_page(thread)).status_code == 200


# --- deleting -------------------------------------------------------------------------------------------------------


def traced_thread(owner, title: str) -> Thread:
    thread = make_thread(owner, title)
    for n in range(2):
        run = stored_run(owner, thread=thread, input=f"{title} {n}")
        model_step(run, tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"expression": "1+1"}}])
        tool_step(run, arguments={"expression": "1+1"}, output="2")
        model_step(run, final_answer="2")
    return thread


@pytest.fixture
def deletions(monkeypatch):
    """The threads the admin deleted through agents.runs.submit.delete_thread (which still does the deleting)."""
    from agents.runs import submit

    deleted: list = []
    real = submit.delete_thread

    def recording(*, thread):
        deleted.append(thread.pk)
        real(thread=thread)

    monkeypatch.setattr(submit, "delete_thread", recording)
    return deleted


def test_deleting_a_thread_deletes_its_runs_and_steps(superuser, alice, deletions):
    doomed, kept = traced_thread(alice, "doomed"), traced_thread(alice, "kept")
    lone = stored_run(alice, input="no thread")
    doomed_runs = list(Run.objects.filter(thread=doomed).values_list("pk", flat=True))
    assert Step.objects.filter(run__in=doomed_runs).count() == 6
    client = logged_in(superuser)
    confirm = client.get(f"{THREADS}{doomed.pk}/delete/")
    assert confirm.status_code == 200
    for run in Run.objects.filter(pk__in=doomed_runs):
        assert str(run) in confirm.content.decode()  # the confirmation lists the runs that go with it
    response = client.post(f"{THREADS}{doomed.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert deletions == [doomed.pk]
    assert not Thread.objects.filter(pk=doomed.pk).exists()
    assert not Run.objects.filter(pk__in=doomed_runs).exists()
    assert not Step.objects.filter(run_id__in=doomed_runs).exists()
    assert Run.objects.filter(thread=kept).count() == 2
    assert Step.objects.filter(run__thread=kept).count() == 6
    assert Run.objects.filter(pk=lone.pk).exists()


def test_deleting_selected_threads_deletes_their_runs_and_steps(superuser, alice, bob, deletions):
    first, second, kept = traced_thread(alice, "first"), traced_thread(bob, "second"), traced_thread(alice, "kept")
    body = {"action": "delete_selected", "_selected_action": [str(first.pk), str(second.pk)], "post": "yes"}
    response = logged_in(superuser).post(THREADS, body)
    assert response.status_code == 302
    assert sorted(deletions) == sorted([first.pk, second.pk])
    assert list(Thread.objects.values_list("pk", flat=True)) == [kept.pk]
    assert set(Run.objects.values_list("thread_id", flat=True)) == {kept.pk}
    assert Step.objects.exclude(run__thread=kept).count() == 0
    assert Step.objects.count() == 6

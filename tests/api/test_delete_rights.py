"""Who may delete another user's run, child run or thread (issue 47): Django's delete permission, never the review
right alone; and every such deletion is in the admin's log entries (who, when, what)."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission

from agents.models import Run, Step, Thread
from tests.api.conftest import create_run, run_url
from tests.conftest import client_for, make_user, stored_run_fields

pytestmark = pytest.mark.django_db

THREADS = "/api/v1/threads"


def _with_perm(user, codename: str):
    user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="agents"))
    return type(user).objects.get(pk=user.pk)  # a fresh object: Django caches permissions on the instance


def _bob_tree(bob) -> tuple[Run, Run]:
    parent = Run.objects.create(owner=bob, **stored_run_fields())
    child = Run.objects.create(owner=bob, parent=parent, depth=1, parent_call_id="c1", **stored_run_fields())
    for run in (parent, child):
        Step.objects.create(run=run, index=0, kind="user", data={"content": "hi"})
    return parent, child


def test_a_reviewer_reads_but_cannot_delete_another_users_run_or_child_run(reviewer, bob):
    api = client_for(reviewer)
    parent, child = _bob_tree(bob)
    for run in (child, parent):
        assert api.get(run_url(run.pk)).status_code == 200
        assert api.delete(run_url(run.pk)).status_code == 404
        assert api.get(run_url(run.pk)).status_code == 200  # the read stays
    assert Run.objects.filter(pk__in=[parent.pk, child.pk]).count() == 2
    assert Step.objects.filter(run__in=[parent, child]).count() == 2
    assert not LogEntry.objects.exists()


def test_a_reviewer_cannot_delete_another_users_thread(reviewer, bob):
    thread = Thread.objects.create(owner=bob, title="bob's")
    Run.objects.create(owner=bob, thread=thread, **stored_run_fields())
    api = client_for(reviewer)
    assert api.get(f"{THREADS}/{thread.pk}").status_code == 200
    assert api.delete(f"{THREADS}/{thread.pk}").status_code == 404
    assert Thread.objects.filter(pk=thread.pk).exists() and Run.objects.filter(thread=thread).count() == 1


def test_staff_with_the_delete_permission_deletes_another_users_run_and_it_is_logged(reviewer, bob):
    deleter = _with_perm(reviewer, "delete_run")
    parent, child = _bob_tree(bob)
    response = client_for(deleter).delete(run_url(parent.pk))
    assert response.status_code == 204
    assert not Run.objects.filter(pk__in=[parent.pk, child.pk]).exists()  # the child goes with its parent
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.action_flag, entry.object_id) == (deleter.pk, DELETION, str(parent.pk))
    assert entry.content_type.model_class() is Run
    assert entry.get_change_message() == f"Deleted over the API: {parent} of bob, with 1 steps and 1 child runs."


def test_the_delete_permission_without_staff_deletes_only_ones_own(bob):
    carol = _with_perm(make_user("carol"), "delete_run")  # not staff: Django's admin rights need is_staff too
    run = Run.objects.create(owner=bob, **stored_run_fields())
    assert client_for(carol).delete(run_url(run.pk)).status_code == 404
    assert Run.objects.filter(pk=run.pk).exists()


def test_a_superuser_deletes_another_users_thread_and_it_is_logged(bob):
    root = make_user("root", staff=True, superuser=True)
    thread = Thread.objects.create(owner=bob, title="bob's")
    Run.objects.create(owner=bob, thread=thread, **stored_run_fields())
    assert client_for(root).delete(f"{THREADS}/{thread.pk}").status_code == 204
    assert not Thread.objects.filter(pk=thread.pk).exists() and not Run.objects.filter(owner=bob).exists()
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.object_id, entry.object_repr) == (root.pk, str(thread.pk), "bob's")
    assert entry.get_change_message() == "Deleted over the API: bob's of bob, with 1 runs."


def test_staff_with_delete_thread_only_still_cannot_delete_runs(reviewer, bob):
    deleter = _with_perm(reviewer, "delete_thread")
    run = Run.objects.create(owner=bob, **stored_run_fields())
    assert client_for(deleter).delete(run_url(run.pk)).status_code == 404
    assert Run.objects.filter(pk=run.pk).exists()


def test_an_owner_deleting_their_own_run_leaves_no_audit_entry(api):
    run_id = create_run(api).json()["id"]
    assert api.delete(run_url(run_id)).status_code == 204
    assert not Run.objects.filter(pk=run_id).exists()
    assert not LogEntry.objects.exists()


def test_the_console_lists_the_deletion_read_only(reviewer, bob, client):
    root = make_user("root", staff=True, superuser=True)
    run = Run.objects.create(owner=bob, **stored_run_fields())
    assert client_for(root).delete(run_url(run.pk)).status_code == 204
    client.force_login(root)
    page = client.get("/admin/admin/logentry/")
    assert page.status_code == 200
    assert f"Deleted over the API: {run} of bob" in page.content.decode()
    entry = LogEntry.objects.get()
    assert client.post(f"/admin/admin/logentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert LogEntry.objects.filter(pk=entry.pk).exists()

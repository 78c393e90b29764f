"""A path's id: every spelling of a UUID that Python reads finds the same row; anything else is the API's JSON 404
before a view runs."""

from __future__ import annotations

import uuid

import pytest

from tests.api.conftest import create_run, run_url

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "spell",
    [str, lambda i: str(i).upper(), lambda i: i.hex, lambda i: "{" + str(i) + "}"],
    ids=["lower", "upper", "no-hyphens", "braces"],
)
def test_every_spelling_of_a_run_id_finds_the_run(api, spell):
    run_id = uuid.UUID(create_run(api).json()["id"])
    response = api.get(run_url(spell(run_id)))
    assert response.status_code == 200
    assert response.json()["id"] == str(run_id)


@pytest.mark.parametrize("path", ["runs/not-a-uuid", "threads/12345", "webhooks/000", "schedules/zz", "keys/x-y"])
def test_an_id_that_is_no_uuid_is_a_json_404(api, path):
    response = api.get(f"/api/v1/{path}")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}

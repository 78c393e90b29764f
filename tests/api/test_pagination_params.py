"""`limit` and `offset` are whole numbers or a 400 naming them; never quietly read as the default (issue 10)."""

from __future__ import annotations

import pytest

from agents.api.pagination import MAX_OFFSET
from tests.api.conftest import RUNS, make_runs

pytestmark = pytest.mark.django_db

FACTS = "/api/v1/memory/facts"
LISTS = [RUNS, FACTS, f"{FACTS}?q=tea"]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("offset=null", "offset"),
        ("offset=-1", "offset"),
        ("offset=", "offset"),
        ("offset=1.0", "offset"),
        (f"offset={MAX_OFFSET + 1}", "offset"),
        ("offset=" + "9" * 5000, "offset"),
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("limit=%205", "limit"),
        ("limit=\u0663", "limit"),  # an Arabic-Indic digit: int() would take it
    ],
)
def test_bad_limit_or_offset_is_400_naming_it(api, url, query, name):
    joiner = "&" if "?" in url else "?"
    response = api.get(f"{url}{joiner}{query}")
    assert response.status_code == 400, response.content
    assert name in response.json()


def test_limit_above_the_cap_is_capped_and_offset_pages(api, alice):
    make_runs(alice, 3)
    body = api.get(f"{RUNS}?limit={'9' * 40}&offset=002").json()
    assert (body["count"], len(body["results"])) == (3, 1)
    assert "limit=200" in body["previous"]


def test_delete_of_a_malformed_fact_id_is_a_json_404(api):
    for fact_id in ["abc", "1.5", "-1", "\u0663", "9" * 30]:
        response = api.delete(f"{FACTS}/{fact_id}")
        assert response.status_code == 404, fact_id
        assert response["Content-Type"] == "application/json", fact_id

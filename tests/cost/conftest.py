"""Spend in currency (issue 38, part 4; docs/cost.md): fixtures shared by the price, usage and quota tests."""

from __future__ import annotations

import pytest

from agents.usage import prices


@pytest.fixture(autouse=True)
def _no_price_rows_from_another_test():
    """The console's prices are kept in the process for seconds; a test's rows are rolled back without a signal, so
    each test starts and ends with none kept."""
    prices.ROWS.forget()
    yield
    prices.ROWS.forget()

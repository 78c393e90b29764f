"""Fixtures of the CLI tests."""

from __future__ import annotations

import io
import logging

import pytest


@pytest.fixture(autouse=True)
def _agents_log_level():
    """The command quiets the `agents` loggers for its own output; in-process that would outlive the test."""
    logger = logging.getLogger("agents")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.fixture
def admin(db):
    """The CLI's default owner, as `ensure_admin` creates it."""
    from tests.integration._support import quick_user

    return quick_user("admin", is_staff=True, is_superuser=True)


@pytest.fixture
def no_tty(monkeypatch):
    """No terminal to ask on (stdin is empty)."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

"""Fixtures of the CLI tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _agents_log_level():
    """The command quiets the `agents` loggers for its own output; in-process that would outlive the test."""
    logger = logging.getLogger("agents")
    level = logger.level
    yield
    logger.setLevel(level)

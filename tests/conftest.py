"""Shared fixtures."""

import os

import pytest

# Loopback must never go through a proxy (the SDKs honour HTTP_PROXY).
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

from tests.support.http_stub import StubServer  # noqa: E402


@pytest.fixture
def stub():
    """A scripted HTTP server on 127.0.0.1, stopped after the test."""
    with StubServer() as server:
        yield server

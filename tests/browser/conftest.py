"""Browser tests: Playwright's sync API drives Debian's Chromium (headless) against pytest-django's live server.

Never a downloaded browser: the tests use /usr/bin/chromium and are skipped when it is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
TIMEOUT_MS = 15_000


def pytest_collection_modifyitems(config, items):
    reason = None
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        reason = f"{CHROMIUM} is missing (install Debian's chromium package; .ci/run does)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed (make install-dev)"
    if reason:
        here = Path(__file__).parent
        for item in items:
            if here in Path(str(item.fspath)).parents:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def _sync_orm_beside_playwright():
    """Playwright's sync API keeps an asyncio loop on this thread; Django's ORM then refuses to run unless told
    it is safe (it is: nothing here is async). Set only while a browser module runs, restored afterwards."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="module")
def browser(_sync_orm_beside_playwright):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def new_page(browser, live_server, transactional_db):
    """new_page() -> a page in a fresh browser context (its own cookies) on the live server; closed afterwards."""
    contexts = []

    def make():
        context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.errors = []  # uncaught page errors, checked by the tests
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        return page

    yield make
    for context in contexts:
        context.close()


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """Users are made per test: a cheap hasher keeps the suite fast (the hasher is not under test here)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def ddg(stub, settings):
    """The search tool's DuckDuckGo branch, answered by the local stub (tests script its answer)."""
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    return stub


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def login(page, username: str, next_url: str = "/") -> None:
    """Log in through the site's login form, as a person would."""
    page.goto(f"/accounts/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("#login-button")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

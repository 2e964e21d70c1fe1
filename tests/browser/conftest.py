"""Playwright for Python driving Debian's Chromium (never a downloaded browser)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.core.servers.basehttp import ThreadedWSGIServer
from django.db import connections

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the browser tests (a launch takes a second or two);
    every test still gets a context of its own (browser_context)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Debian's chromium is missing at {CHROMIUM}: run scripts/ensure-chromium")
    # Playwright's sync API runs an event loop in this thread; the test's own
    # ORM calls stay synchronous and safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where a test's screenshots go: SCREENSHOT_DIR when it is set (to
    refresh the ones docs/ shows: `SCREENSHOT_DIR=docs/workspace pytest
    tests/browser/test_workspace.py`), else the test's own temporary folder,
    so that a test run leaves the repository as it found it."""
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser_context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh context per test: no cookie, storage or cache of an earlier
    test. Every page a browser test opens is also held to the site's
    Content-Security-Policy: Chromium reports each thing the policy refused
    (an inline script, a handler attribute, a foreign source) on the
    console, and any such report fails the test (a test that expects one
    takes it from `context.csp_refused`)."""
    context = browser.new_context()
    refused: list[str] = []
    context.csp_refused = refused  # type: ignore[attr-defined]
    context.on(
        "console",
        lambda message: refused.append(f"{message.page.url if message.page else ''}: {message.text}")
        if "Content Security Policy" in message.text
        else None,
    )
    try:
        yield context
        assert not refused, "the page broke its Content-Security-Policy:\n" + "\n".join(refused)
    finally:
        context.close()
        _join_request_threads()
        # ORM calls made while Playwright's loop was alive may have opened
        # a connection of their own; close it here, in the same context.
        connections.close_all()


def _join_request_threads(timeout: float = 10.0) -> None:
    """Wait (bounded) for the live server's keep-alive request threads to end.

    Each holds a database connection until its socket closes; left running,
    one makes the test database's teardown fail with "being accessed by
    other users".
    """
    current = threading.current_thread()
    for thread in threading.enumerate():
        target = getattr(thread, "_target", None)
        # The live server's own request threads only: a local HTTP server
        # another test ran (a webhook receiver, a fake provider) has request
        # threads of the same name that hold no database connection, and
        # waiting for each of those kept a browser test ten seconds a thread.
        if (
            thread is not current
            and getattr(target, "__name__", "") == "process_request_thread"
            and isinstance(getattr(target, "__self__", None), ThreadedWSGIServer)
        ):
            thread.join(timeout)

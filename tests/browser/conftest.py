"""Browser fixtures: the system Chromium through playwright, skipped (or failed under CI)
when either is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.harness import CHROMIUM, launch
from tests.conftest import service_missing


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module."""
    if not os.access(CHROMIUM, os.X_OK):
        service_missing("Chromium", f"{CHROMIUM} is missing: apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        service_missing("playwright", "install the dev extra: pip install -e '.[dev]'")
        raise
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page, closed after the test."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="zh-CN")
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()

"""Driving the dashboard in a real headless Chromium (Playwright with Debian's ``chromium``).

Used by the screenshot script and the end-to-end test. Playwright's own browser download does not
work on these machines, so the system binary is launched with ``executable_path``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# no GPU, no sandbox (root), and no background connections: this machine's network is closed
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 60_000


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 1000) -> Iterator[Page]:
    """A page in a fresh headless Chromium profile (a new, empty user-data dir)."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="dnarch-chromium-") as profile, \
            sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height})
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def wait_idle(page: Page, rerun: bool = False) -> None:
    """Wait until the script has finished running and the plotly charts have drawn; with
    ``rerun``, first give the rerun an interaction triggers up to 2 s to start."""
    if rerun:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            page.locator('[data-testid="stApp"][data-test-script-state="running"]').wait_for(
                timeout=2000)
        except PlaywrightTimeout:
            pass  # it may have started and finished already
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
        ".every(c => c.querySelector('.main-svg'))")
    page.wait_for_timeout(500)  # let the last layout settle before a screenshot


def open_dashboard(page: Page, url: str) -> None:
    """Load the page and wait for the first run of the script to be drawn."""
    page.goto(url)
    page.get_by_test_id("stSidebar").wait_for()
    page.get_by_test_id("stMainBlockContainer").get_by_role("heading").first.wait_for()
    wait_idle(page)


def choose_view(page: Page, view: str) -> None:
    page.get_by_test_id("stRadioGroup").get_by_text(view, exact=True).click()
    page.get_by_role("heading", name=view, exact=True).wait_for()
    wait_idle(page, rerun=True)


def chosen_runs(page: Page) -> list[str]:
    tags = page.get_by_test_id("stSidebar").locator("[aria-label^='Remove ']")
    return [label.removeprefix("Remove ") for label in
            tags.evaluate_all("tags => tags.map(t => t.getAttribute('aria-label'))")]


def choose_runs(page: Page, names: list[str]) -> None:
    """Make ``names`` the chosen runs in the sidebar's multiselect."""
    sidebar = page.get_by_test_id("stSidebar")
    for name in chosen_runs(page):
        if name not in names:
            sidebar.get_by_role("button", name=f"Remove {name}", exact=True).click()
            wait_idle(page, rerun=True)
    for name in names:
        if name not in chosen_runs(page):
            sidebar.get_by_role("combobox", name="Runs").click()
            page.get_by_role("option", name=name, exact=True).click()
            page.keyboard.press("Escape")
            wait_idle(page, rerun=True)


def screenshot(page: Page, path: str, max_height: int = 6000) -> None:
    """A PNG of the whole page. Streamlit scrolls inside its main container, not the document,
    so the viewport is first made as tall as that container's content."""
    width = page.viewport_size["width"] if page.viewport_size else 1400
    page.set_viewport_size({"width": width, "height": 900})  # measure from a short page
    wait_idle(page)
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll("
        "'[data-testid=\"stMain\"], [data-testid=\"stMainBlockContainer\"], "
        "[data-testid=\"stSidebarContent\"]')].map(e => e.scrollHeight), 600)")
    page.set_viewport_size({"width": width, "height": min(int(height) + 40, max_height)})
    wait_idle(page)
    page.screenshot(path=path)
    page.set_viewport_size({"width": width, "height": 900})

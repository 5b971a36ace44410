"""End to end: the real server on a free localhost port, driven in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from dashboard import browser, server

from .dashboard_runs import DARCY, GUNPOINT, TRAINING

pytest.importorskip("playwright", reason="playwright is in the dev extra")
if not os.path.exists(browser.CHROMIUM):
    pytest.skip(f"{browser.CHROMIUM} is not installed (apt-get install chromium)",
                allow_module_level=True)


def not_blank(png: Path) -> float:
    """Pixel standard deviation of a screenshot (a blank page is ~0)."""
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("L"), dtype=float)
    return float(pixels.std())


@pytest.mark.slow
def test_switch_run_and_view_in_chromium(runs_dir, tmp_path):
    from playwright.sync_api import expect

    with server.running(runs_dir, log=tmp_path / "server.log") as url, \
            browser.chromium_page() as page:
        assert url.startswith("http://localhost:")
        browser.open_dashboard(page, url)
        expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
        expect(page.get_by_test_id("stDataFrame").first).to_be_visible()
        expect(page.get_by_text("Test metric vs complexity ratio")).to_be_visible()
        assert browser.chosen_runs(page) == [DARCY]

        browser.choose_view(page, "Architecture")
        expect(page.get_by_text("Kernel extents over the input grid")).to_be_visible()
        browser.choose_runs(page, [GUNPOINT])
        assert browser.chosen_runs(page) == [GUNPOINT]
        expect(page.get_by_role("heading", name=GUNPOINT)).to_be_visible()
        expect(page.get_by_text("Kernel extents over the input", exact=True)).to_be_visible()
        expect(page.get_by_text("Kernel extents over the input grid")).to_have_count(0)

        browser.choose_view(page, "Training")
        expect(page.get_by_text("Task metric: accuracy")).to_be_visible()
        expect(page.get_by_test_id("stPlotlyChart")).to_have_count(3)
        expect(page.locator("body")).to_contain_text("Complexity ratio vs target")
        expect(page.locator("body")).to_contain_text("Finished: test accuracy")

        png = tmp_path / "training.png"
        browser.screenshot(page, str(png))
        assert png.stat().st_size > 10_000
        assert not_blank(png) > 5.0


@pytest.mark.slow
def test_a_training_run_refreshes_itself(runs_dir, tmp_path):
    """A new metrics row of a run still training appears without touching the page."""
    from playwright.sync_api import expect

    runs = tmp_path / "runs"
    shutil.copytree(runs_dir / TRAINING, runs / TRAINING)
    metrics = runs / TRAINING / "metrics.jsonl"
    last = json.loads(metrics.read_text().splitlines()[-1])
    with server.running(runs, log=tmp_path / "server.log") as url, \
            browser.chromium_page() as page:
        browser.open_dashboard(page, url)
        browser.choose_view(page, "Training")
        status = page.get_by_text(re.compile(r"^Still training"))
        expect(status).to_contain_text(f"step {last['step']}.")
        row = {**last, "step": last["step"] + 1000, "epoch": last["epoch"] + 1}
        with open(metrics, "a") as f:
            f.write(json.dumps(row) + "\n")
        expect(status).to_contain_text(f"epoch {row['epoch']}, step {row['step']}.",
                                       timeout=30_000)


@pytest.mark.slow
def test_pareto_point_click_opens_its_architecture(sweep_dir, tmp_path):
    """The Pareto view in Chromium: both families drawn; a click on the base point opens that
    run in the Architecture view."""
    from playwright.sync_api import expect

    with server.running(sweep_dir.parent, log=tmp_path / "server.log") as url, \
            browser.chromium_page() as page:
        browser.open_dashboard(page, url)
        browser.choose_view(page, "Pareto")
        chart = page.get_by_test_id("stPlotlyChart").first
        expect(chart).to_contain_text("Test accuracy vs onnxruntime latency, batch 1")
        expect(chart).to_contain_text("base CCNN (width x depth)")
        png = tmp_path / "pareto.png"
        browser.screenshot(page, str(png))
        assert not_blank(png) > 5.0
        base = chart.locator(".scatterlayer .trace").nth(2).locator("path.point")  # 3rd trace
        expect(base).to_have_count(1)
        base.click(force=True)
        page.get_by_role("heading", name="Architecture", exact=True).wait_for()
        browser.wait_idle(page, rerun=True)
        assert browser.chosen_runs(page) == ["sweep/runs/base-w4-d1-s0"]
        expect(page.get_by_text("Kernel extents over the input", exact=True)).to_be_visible()

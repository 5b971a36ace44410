"""The screenshot list of python -m dashboard.screenshots (the photographs need Chromium and
real runs: the browser test drives the same pages)."""

from __future__ import annotations

from dashboard import app
from dashboard.screenshots import shots


def test_every_view_is_photographed_once_per_file_with_the_runs_it_needs():
    taken = shots("one", "two")
    files = [f for f, _, _ in taken]
    assert len(files) == len(set(files)) and all(f.endswith(".png") for f in files)
    views = {view for _, view, _ in taken}
    assert views <= set(app.VIEWS) and {"Runs", "Architecture", "Training"} <= views
    assert all(runs and set(runs) <= {"one", "two"} for _, _, runs in taken)

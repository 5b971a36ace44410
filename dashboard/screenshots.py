"""PNG screenshots of every dashboard view, from real runs, for the README (docs/screenshots/).

    python -m dashboard.screenshots                  # make two small real runs first (minutes)
    python -m dashboard.screenshots --runs runs/ --one-d NAME --two-d NAME
    python -m dashboard.screenshots --sweep runs/gp-front   # only the Pareto view of a sweep

Without ``--runs`` it runs ``python -m search.run`` on ucr:GunPoint (1-D classification) and on
darcy (2-D dense), exports both with ``python -m export.onnx``, then serves the dashboard on a free
localhost port and photographs each view in headless Chromium.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from . import browser, server

# a budget of half the base network's cost makes the search shrink it: kernels, widths, resolution
SEARCHES = {
    "gunpoint": ["--task", "ucr:GunPoint", "--depth", "4", "--width", "16", "--epochs", "30",
                 "--batch-size", "16", "--budget", "0.5", "--lam", "1"],
    "darcy": ["--task", "darcy", "--task-option", "size=33", "--task-option", "n_train=200",
              "--task-option", "n_val=50", "--task-option", "n_test=50", "--depth", "3",
              "--width", "12", "--epochs", "10", "--batch-size", "16",
              "--budget", "0.5", "--lam", "1"],
}


def shots(one_d: str, two_d: str) -> list[tuple[str, str, list[str]]]:
    """(file name, view, chosen runs) for each screenshot."""
    return [
        ("runs.png", "Runs", [one_d, two_d]),
        ("architecture.png", "Architecture", [one_d]),
        ("architecture-2d.png", "Architecture", [two_d]),
        ("evolution.png", "Evolution", [one_d]),
        ("training.png", "Training", [one_d]),
        ("deployment.png", "Deployment", [one_d]),
        ("compare.png", "Architecture", [one_d, two_d]),
    ]


def make_runs(root: Path) -> None:
    for name, flags in SEARCHES.items():
        out = root / name
        print(f"search: {out}", flush=True)
        subprocess.run([sys.executable, "-m", "search.run", *flags, "--out", str(out)], check=True)
        print(f"export: {out}", flush=True)
        subprocess.run([sys.executable, "-m", "export.onnx", str(out)], check=True)


def photograph(runs: Path, out: Path, one_d: str, two_d: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with server.running(runs) as url, browser.chromium_page(width=1400, height=900) as page:
        browser.open_dashboard(page, url)
        for file, view, chosen in shots(one_d, two_d):
            browser.choose_view(page, view)
            browser.choose_runs(page, chosen)
            path = out / file
            browser.screenshot(page, str(path))
            print(f"wrote {path}", flush=True)
            written.append(path)
    return written


def photograph_sweep(sweep: Path, out: Path) -> Path:
    """pareto.png: the Pareto view of a sweep directory (python -m search.sweep)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "pareto.png"
    with server.running(sweep) as url, browser.chromium_page(width=1400, height=900) as page:
        browser.open_dashboard(page, url)
        browser.choose_view(page, "Pareto")
        browser.screenshot(page, str(path))
    print(f"wrote {path}", flush=True)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dashboard.screenshots",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--runs", type=Path, default=None,
                        help="existing runs directory (default: make two small runs first)")
    parser.add_argument("--one-d", default="gunpoint", help="the 1-D run's name under --runs")
    parser.add_argument("--two-d", default="darcy", help="the 2-D run's name under --runs")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"),
                        help="folder for the PNG files")
    parser.add_argument("--sweep", type=Path, default=None,
                        help="photograph only the Pareto view of this sweep directory")
    args = parser.parse_args(argv)
    if args.sweep is not None:
        photograph_sweep(args.sweep, args.out)
        return
    if args.runs is not None:
        photograph(args.runs, args.out, args.one_d, args.two_d)
        return
    with tempfile.TemporaryDirectory(prefix="dnarch-screenshots-") as tmp:
        make_runs(Path(tmp))
        photograph(Path(tmp), args.out, "gunpoint", "darcy")


if __name__ == "__main__":
    main()

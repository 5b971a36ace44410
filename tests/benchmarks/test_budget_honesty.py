"""python -m benchmarks.budget_honesty --report-only on hand-made sweeps: its tables and targets
against figures computed by hand (the comments), through the command line as a user runs it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from dnarch_deploy import sweepdir as S
from tests.benchmarks.scripts import run


def row(kind: str, seed: int, ms1: float, ms32: float, metric: float, macs: float,
        budget: float | None = None, width: int = 32, depth: int = 4) -> dict:
    """A pareto.json row; searches grew from the base CCNN_{4,32}. ``macs`` in thousands."""
    return {"kind": kind, "budget": budget, "width": width, "depth": depth, "seed": seed,
            "test_metric": metric, "ms": {"1": ms1, "32": ms32}, "macs": macs * 1e3, "params": 1,
            "run_dir": f"runs/{kind}-{seed}", "pareto": {"1": False, "32": False}}


def write_sweep(out: Path, task: str, rows: list[dict]) -> None:
    sweep_dir = out / task.replace(":", "-")
    sweep_dir.mkdir(parents=True)
    (sweep_dir / S.PARETO).write_text(json.dumps({
        "schema": S.PARETO_SCHEMA, "version": S.VERSION, "task": task,
        "metric_name": "accuracy", "higher_is_better": True, "batches": [1, 32], "threads": 1,
        "repeats": 5, "rows": rows}))


def gunpoint() -> list[dict]:
    rows = []
    for seed in (0, 1):
        rows += [row("base", seed, 2.0, 20.0, 0.95, 1000),  # the base CCNN_{4,32}
                 row("base", seed, 1.0, 8.0, 0.90 + 0.02 * seed, 300, width=16),
                 row("base", seed, 1.15, 9.0, 0.93 + 0.02 * seed, 500, depth=2),
                 row("base", seed, 0.58, 5.0, 0.80 + 0.02 * seed, 90, width=8)]
    return rows + [
        # 0.25: B=1 ratios 0.25, 0.30; B=32 0.35, 0.35; MACs 0.25, 0.27
        row("search", 0, 0.5, 7.0, 0.85, 250, 0.25), row("search", 1, 0.6, 7.0, 0.87, 270, 0.25),
        # 0.5: B=1 0.55, 0.55; B=32 0.5, 0.5; MACs 0.5, 0.5
        row("search", 0, 1.1, 10.0, 0.93, 500, 0.5), row("search", 1, 1.1, 10.0, 0.96, 500, 0.5),
        # 1: B=1 1.1, 1.5; B=32 1.05, 1.5; MACs 1, 1
        row("search", 0, 2.2, 21.0, 0.95, 1000, 1.0), row("search", 1, 3.0, 30.0, 0.95, 1000, 1.0),
    ]


def digits() -> list[dict]:
    rows = []
    for seed in (0, 1):
        rows += [row("base", seed, 2.0, 20.0, 0.95, 1000),
                 row("base", seed, 1.5, 12.0, 0.94, 300, width=16),
                 row("search", seed, 1.0, 5.0, 0.90, 300, 0.25)]  # B=1 0.5, B=32 0.25
    return rows


def cells(text: str, start: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.mark.slow
def test_report_only_tables_and_targets(tmp_path: Path):
    out, results = tmp_path / "bh", tmp_path / "bh.md"
    rows = gunpoint()
    for r in rows:  # each search its own run directory, as search.sweep names them
        if r["kind"] == "search":
            r["run_dir"] = f"runs/search-b{r['budget']:g}-s{r['seed']}"
    write_sweep(out, "ucr:GunPoint", rows)
    write_sweep(out, "digits", digits())
    # run directories for table 6: GunPoint's budget-0.25 search of seed 0 found two blocks and
    # restarted; its budget-0.5 one found one block and did not; seed 1's 0.25 one has a damaged
    # architecture.json and summary.json; every other run directory is gone
    runs = out / "ucr-GunPoint" / "runs"
    block = {"kernel_size": [41], "resolution": [150], "n_in": 20, "n_mid": 24, "n_out": 20}
    short = {"kernel_size": [3], "resolution": [120], "n_in": 20, "n_mid": 9, "n_out": 20}
    # (the budget-0.25 one's base re-priced by latency checks, the budget-0.5 one's MACs: none)
    for name, blocks, restarts, base_ms in (
            ("search-b0.25-s0", [block, short], [{"step": 600}], [0.3512, 6.25]),
            ("search-b0.5-s0", [short], [], [])):
        (runs / name).mkdir(parents=True)
        (runs / name / "architecture.json").write_text(json.dumps({
            "learn": "KRWD", "depth": len(blocks), "max_depth": 8, "stream_width": 20,
            "max_width": 64,
            "input_size": [150], "blocks": blocks}))
        (runs / name / "summary.json").write_text(json.dumps({"restarts": restarts,
                                                              "base_ms": base_ms}))
    (runs / "search-b0.25-s1").mkdir()
    (runs / "search-b0.25-s1" / "architecture.json").write_text('{"blocks": null}')
    (runs / "search-b0.25-s1" / "summary.json").write_text("[]")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = run("budget_honesty", "--report-only", "--tasks", "ucr:GunPoint", "digits", "--seeds",
               "2", "--out", out, "--results", results, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text()
    assert proc.stdout.strip() == text.strip()
    # the command as a user would type it, no directory of this machine in it
    command = next(ln for ln in text.splitlines() if ln.startswith("Command: "))
    assert command.startswith("Command: `python -m benchmarks.budget_honesty --report-only "
                              "--tasks ucr:GunPoint digits --seeds 2 --out OUT/")
    assert str(tmp_path) not in command and command.endswith(f"/{results.name}`  ")

    # Table 1: cost-model ratio, measured B=1 and B=32 (mean ± std over the 2 seeds), within
    # ±20 % of the budget (0.275 / 0.25 = 1.1: met; 0.35 / 0.25 = 1.4: missed)
    t1 = "| task | budget | cost model"
    head = text.index(t1)
    assert cells(text[head:], "| ucr:GunPoint | 0.25 |")[2:] == [
        "0.260 ± 0.014", "0.275 ± 0.035", "0.350 ± 0.000", "met / **missed**"]
    assert cells(text[head:], "| ucr:GunPoint | 0.5 |")[2:] == [
        "0.500 ± 0.000", "0.550 ± 0.000", "0.500 ± 0.000", "met / met"]
    assert cells(text[head:], "| ucr:GunPoint | 1 |")[2:] == [
        "1.000 ± 0.000", "1.300 ± 0.283", "1.275 ± 0.318", "**missed** / **missed**"]
    assert cells(text[head:], "| digits | 0.25 |")[2:] == [
        "0.300 ± 0.000", "0.500 ± 0.000", "0.250 ± 0.000", "**missed** / met"]
    assert cells(text[head:], "| digits | 0.5 |")[2] == "no search"

    # Table 2. GunPoint 0.25: found 0.55 ms; 8x4 at 0.58 / 0.55 = 1.05x, accuracy 0.81 ± 0.014
    # against 0.86 ± 0.014: a win. 0.5: found 1.1 ms; 16x4 (0.91x) and 32x2 (1.05x) within 10 %,
    # the better 32x2 0.94 ± 0.014 against 0.945 ± 0.021: a tie. digits 0.25: found 1.0 ms, the
    # nearest base point 16x4 at 1.5x: not at equal latency
    t2 = text[text.index("| task | budget | found: test metric"):text.index("## Targets")]
    assert cells(t2, "| ucr:GunPoint | 0.25 |")[2:] == [
        "accuracy 0.860 ± 0.014", "0.550 ± 0.071", "8x4: 1.05x, 0.810 ± 0.014",
        "win against 8x4"]
    assert cells(t2, "| ucr:GunPoint | 0.5 |")[4:] == [
        "16x4: 0.91x, 0.910 ± 0.014; 32x2: 1.05x, 0.940 ± 0.014", "tie against 32x2"]
    assert cells(t2, "| digits | 0.25 |")[4:] == [
        "none; nearest 16x4: 1.50x, 0.940 ± 0.000",
        "(loss against 16x4, not at equal latency)"]
    assert not any(ln.startswith("| ucr:GunPoint | 1 |") for ln in t2.splitlines())

    targets = text[text.index("## Targets"):text.index("## Against the base family's front")]
    # table 3: per task and batch one row per budget and a count; the verdicts are
    # search.pareto.against_base_front's (tested in tests/search/test_sweep.py)
    front = text[text.index("## Against the base family's front"):]
    for task in ("ucr:GunPoint", "digits"):
        for batch in ("1", "32"):
            assert re.search(rf"\| {re.escape(task)} \| {batch} \| \*\*all\*\* \| \| "
                             rf"\*\*\d of \d\*\* \|", front), (task, batch)
    assert "0.25, 0.5 and 1, on every task: **missed** (4 of 12; 4 not measured)" in targets
    assert ("At budget 0.25, DNArch(K,R,W,D) beats the narrowed base at equal latency (±10%) "
            "on ≥ 2 of 3 tasks: **missed** (1 of 2: ucr:GunPoint; no base point at equal "
            "latency on digits)") in targets
    assert "At budget 0.5," in targets and "**missed** (0 of 1)" in targets

    # table 4: every point, mean ± std over the 2 seeds (MACs in millions)
    points = text[text.index("## Every point"):]
    assert cells(points, "| ucr:GunPoint | base 16x4 |")[2:] == [
        "0.910 ± 0.014", "0.300 ± 0.000", "1.000 ± 0.000", "8.000 ± 0.000"]
    assert cells(points, "| ucr:GunPoint | search, budget 0.25 |")[2:] == [
        "0.860 ± 0.014", "0.260 ± 0.014", "0.550 ± 0.071", "7.000 ± 0.000"]
    assert cells(points, "| digits | base 32x4 |")[2:] == [
        "0.950 ± 0.000", "1.000 ± 0.000", "2.000 ± 0.000", "20.000 ± 0.000"]
    assert not any(ln.startswith("| digits | search, budget 0.5 |") for ln in points.splitlines())

    # table 5: every model's test metric per seed (the rows of gunpoint() and digits())
    per_seed = text[text.index("## Every seed"):]
    assert cells(per_seed, "| ucr:GunPoint | base 16x4 |")[2:] == ["0.900", "0.920"]
    assert cells(per_seed, "| ucr:GunPoint | search, budget 0.5 |")[2:] == ["0.930", "0.960"]
    assert cells(per_seed, "| digits | search, budget 0.25 |")[2:] == ["0.900", "0.900"]

    # table 6: each searched network's architecture, restart and checked base, "–" where its
    # run dir is gone
    archs = text[text.index("## Architectures found"):]
    # with each network's measured time over its seed's base (the rows' ms above: 0.5 / 2.0 at
    # B=1, 7 / 20 at B=32)
    assert cells(archs, "| ucr:GunPoint | 0.25 | 0 |")[3:] == [
        "0.850", "0.250 / 0.350", "yes", "0.3512 / 6.25",
        "learns KRWD, depth 2 of 8, stream 20 of 64 (input 150): K 41, R 150, 20/24/20; "
        "K 3, R 120, 20/9/20"]
    assert cells(archs, "| ucr:GunPoint | 0.5 | 0 |")[3:] == [
        "0.930", "0.550 / 0.500", "no", "–",
        "learns KRWD, depth 1 of 8, stream 20 of 64 (input 150): K 3, R 120, 20/9/20"]
    assert cells(archs, "| ucr:GunPoint | 0.25 | 1 |")[3:] == [
        "0.870", "0.300 / 0.350", "–", "–", "–"]  # damaged
    assert cells(archs, "| ucr:GunPoint | 1 | 1 |")[3:] == ["0.950", "1.500 / 1.500", "–", "–", "–"]
    assert len([ln for ln in archs.splitlines() if ln.startswith("| ucr:GunPoint |")]) == 6
    assert cells(archs, "| digits | 0.25 | 1 |")[3:] == ["0.900", "0.500 / 0.250", "–", "–", "–"]


@pytest.mark.slow
def test_report_only_without_sweeps_writes_nothing(tmp_path: Path):
    """A wrong --out or a damaged pareto.json: one error naming it, exit 1, and the results file
    left as it was; a damaged invocations.json: one usage error, exit 2."""
    results = tmp_path / "bh.md"
    results.write_text("earlier report\n")
    damaged = tmp_path / "bh" / "ucr-GunPoint"
    damaged.mkdir(parents=True)
    (damaged / S.PARETO).write_text("{broken")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for out, problem in ((tmp_path / "missing", "file not found"),
                         (tmp_path / "bh", "not valid JSON")):
        proc = run("budget_honesty", "--report-only", "--tasks", "ucr:GunPoint", "--out", out,
                   "--results", results, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.count("error:") == 1
        assert f"no sweep in {out} has a usable pareto.json (ucr:GunPoint: " in proc.stderr
        assert problem in proc.stderr and f"{results} not written" in proc.stderr
        assert results.read_text() == "earlier report\n"
    (tmp_path / "bh" / "invocations.json").write_text("[{")
    proc = run("budget_honesty", "--report-only", "--tasks", "ucr:GunPoint", "--out",
               tmp_path / "bh", "--results", results, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "invocations.json cannot be read" in proc.stderr
    assert results.read_text() == "earlier report\n"


@pytest.mark.slow
def test_the_report_names_the_measured_base_a_latency_sweep_used(tmp_path: Path):
    """A sweep that timed its base (--cost latency: sweep.json's base_ms) says so in the
    report's list of sweeps; one without says nothing of it."""
    out, results = tmp_path / "bh", tmp_path / "bh.md"
    write_sweep(out, "ucr:GunPoint", gunpoint())
    write_sweep(out, "digits", digits())
    plan = {"learn": "KRWD", "search_flags": ["--cost", "latency"], "export_flags": [],
            "base_grid": [[32, 4]], "base_ms": [0.25, 7.5]}
    (out / "ucr-GunPoint" / S.PLAN).write_text(json.dumps(plan))
    proc = run("budget_honesty", "--report-only", "--tasks", "ucr:GunPoint", "digits", "--out",
               out, "--results", results, cwd=tmp_path,
               env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = results.read_text().splitlines()
    gunpoint_sweep = next(ln for ln in lines if ln.startswith("- ucr:GunPoint: learn"))
    digits_sweep = next(ln for ln in lines if ln.startswith("- digits: learn"))
    assert gunpoint_sweep.endswith("; the searches' budgets a share of the base's 0.25 / 7.5 "
                                   "ms (sweep.json's base_ms: measured, in the latency table's "
                                   "time).")
    assert "base_ms" not in digits_sweep and digits_sweep.endswith("CPUs.")

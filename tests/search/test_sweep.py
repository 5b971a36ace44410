"""python -m search.sweep: the Pareto rule against a hand-computed case, a tiny real sweep end to
end (runs, exports, one measurement, pareto.json and pareto.png), resume, the job array, and bad
input refused before any run starts."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dnarch_deploy import rundir
from dnarch_deploy.sweepdir import pareto_front, read_pareto
from search import jobs, sweep
from search.jobs import JobError
from search.pareto import against_base_front

from ..sweeps import BATCH, BUDGETS, GRID, SWEEP, run_sweep

# --- the Pareto rule ------------------------------------------------------------------------------


def test_pareto_front_hand_computed():
    #            A     B     C     D     E     F     G
    latency = [1.0, 2.0, 3.0, 2.5, 4.0, 3.0, math.nan]
    metric = [0.50, 0.70, 0.70, 0.60, 0.90, 0.70, 0.99]
    # A fastest; B beats D (faster, better) and C (as good, faster); C and F are equal, both
    # dominated by B; E is the best; G is not measured: never optimal, dominates nothing
    assert pareto_front(latency, metric) == [True, True, False, False, True, False, False]


def test_pareto_front_lower_is_better_and_ties():
    # relative L2 error: lower is better; two equal points are both on the front
    assert pareto_front([1, 1, 2, 3], [0.3, 0.3, 0.2, 0.25], higher_is_better=False) == [
        True, True, True, False]
    assert pareto_front([], []) == []


def row(kind, seed, ms, metric, budget=None, width=32, depth=4):
    return {"kind": kind, "budget": budget, "width": width, "depth": depth, "seed": seed,
            "ms": {"1": ms}, "test_metric": metric}


def test_searched_networks_against_the_base_front_use_means_over_seeds():
    rows = [row("search", 0, 1.0, 0.90, budget=0.25), row("search", 1, 3.0, 0.80, budget=0.25),
            row("search", 0, 4.0, 0.95, budget=1.0), row("search", 1, 4.0, 0.95, budget=1.0),
            row("base", 0, 1.5, 0.86, width=16), row("base", 1, 2.5, 0.84, width=16),
            row("base", 0, 4.0, 0.95), row("base", 1, 4.0, 0.95)]
    # budget 0.25: mean (2.0 ms, 0.85), 16x4 at (2.0 ms, 0.85) is equal, not better: on the front;
    # budget 1: equal to 32x4 itself, and 16x4 is faster but worse: on the front
    assert against_base_front({"rows": rows, "higher_is_better": True}, "1") == {0.25: [],
                                                                               1.0: []}
    rows[5]["test_metric"] = 0.85  # 16x4 now (2.0 ms, 0.855): as fast and better
    assert against_base_front({"rows": rows, "higher_is_better": True}, "1") == {
        0.25: ["16x4"], 1.0: []}
    # lower is better: the same numbers read as errors
    assert against_base_front({"rows": rows, "higher_is_better": False}, "1") == {
        0.25: [], 1.0: ["16x4"]}


# --- a tiny real sweep --------------------------------------------------------------------------


@pytest.mark.slow  # the sweep fixture trains and exports a whole sweep
def test_sweep_writes_rows_marks_and_figure(sweep_dir: Path):
    pareto = read_pareto(sweep_dir)
    rows = pareto["rows"]
    assert pareto["task"] == "ucr:GunPoint" and pareto["batches"] == [1, BATCH]
    assert [(r["kind"], r["budget"], r["seed"]) for r in rows] == [
        ("search", b, 0) for b in BUDGETS] + [("base", None, 0)]
    assert (rows[-1]["width"], rows[-1]["depth"]) == GRID
    latency = json.loads((sweep_dir / "latency.json").read_text())
    measured = {Path(m["run_dir"]).name: m["median_ms"] for m in latency["models"]}
    for row in rows:
        run = sweep_dir / row["run_dir"]
        summary = rundir.read_summary(run)
        assert row["test_metric"] == summary.test_metric
        assert (row["macs"], row["params"]) == (summary.macs, summary.params)
        assert row["ms"] == measured[run.name] and all(v > 0 for v in row["ms"].values())
        assert (run / "export" / "model.onnx").is_file()
        assert rundir.read_config(run).train["learn"] == (
            "none" if row["kind"] == "base" else "KRWD")
    for batch in ("1", str(BATCH)):  # the marks are the rule applied to the rows
        assert [r["pareto"][batch] for r in rows] == pareto_front(
            [r["ms"][batch] for r in rows], [r["test_metric"] for r in rows])
    png = (sweep_dir / "pareto.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


@pytest.mark.slow
def test_a_job_and_resume_reuse_finished_runs_and_exports(sweep_dir: Path, tmp_path: Path):
    """A model whose export was lost: its job (a line of jobs.txt) exports it again without
    training; then --resume, with the flags of sweep.json, reuses everything and measures."""
    out = tmp_path / "sweep"
    shutil.copytree(sweep_dir, out)
    runs = sorted((out / "runs").iterdir())
    stamps = {r.name: (r / "summary.json").stat().st_mtime_ns for r in runs}
    kept = runs[0] / "export" / "model.onnx"
    kept_stamp = kept.stat().st_mtime_ns
    shutil.rmtree(runs[1] / "export")  # killed before this model's export
    (out / "pareto.json").unlink()
    run_sweep("--out", out, "--job", runs[1].name)
    assert (runs[1] / "export" / "model.onnx").is_file()
    assert not (out / "pareto.json").exists()  # a job measures nothing
    run_sweep("--out", out, "--resume")
    assert {r.name: (r / "summary.json").stat().st_mtime_ns for r in runs} == stamps
    assert kept.stat().st_mtime_ns == kept_stamp  # not exported again
    assert len(read_pareto(out)["rows"]) == len(runs)


def lost_export(sweep_dir: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    """A copy of the sweep in which one model lost its export and nothing was measured."""
    out = tmp_path / "sweep"
    shutil.copytree(sweep_dir, out)
    runs = sorted((out / "runs").iterdir())
    shutil.rmtree(runs[1] / "export")
    (out / "pareto.json").unlink()
    (out / "latency.json").unlink()
    return out, runs


@pytest.mark.slow
def test_the_sweep_starts_no_process_of_export(sweep_dir: Path, tmp_path: Path, monkeypatch,
                                               capsys):
    """search starts no ``python -m export.*``: a model's job (``python -m search.sweep --job``,
    run here in this process so that what it starts in turn is recorded too) exports in its own
    process, and the latency is measured in the sweep's. In a log, one line per model."""
    out, runs = lost_export(sweep_dir, tmp_path)
    started, real_run, real_module = [], subprocess.run, jobs.run_module

    def run(cmd, *args, **kwargs):
        cmd = [str(c) for c in cmd]
        started.extend(cmd[i + 1] for i, c in enumerate(cmd[:-1]) if c == "-m")
        return real_run(cmd, *args, **kwargs)

    def run_module(module: str, *args: str) -> float:
        started.append(module)
        if module == "search.sweep":  # the job, here
            assert sweep.main(list(args)) == 0
            return 0.0
        return real_module(module, *args)

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(jobs, "run_module", run_module)
    assert sweep.main(["--out", str(out), "--resume"]) == 0
    assert started == ["search.sweep"]  # one job: the model that lost its export; no export.*
    assert not [m for m in started if m.startswith("export")]
    assert (runs[1] / "export" / "model.onnx").is_file()
    assert len(read_pareto(out)["rows"]) == len(runs)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("models ")]
    assert [line.split()[1] for line in lines] == [f"{i}/{len(runs)}"
                                                   for i in range(1, len(runs) + 1)]
    assert all(" model " in line and " ratio " in line and " elapsed " in line for line in lines)


@pytest.mark.slow  # the sweep fixture trains and exports a whole sweep
def test_a_failed_job_is_named_and_the_finished_models_are_kept(sweep_dir: Path, tmp_path: Path,
                                                                monkeypatch, capsys):
    out, runs = lost_export(sweep_dir, tmp_path)

    def fail(module: str, *args: str) -> float:
        raise JobError(f"python -m {module} failed (1): boom")

    monkeypatch.setattr(jobs, "run_module", fail)
    assert sweep.main(["--out", str(out), "--resume"]) == 1
    err = capsys.readouterr().err
    assert f"FAILED {runs[1].name}: python -m search.sweep failed (1): boom" in err
    assert sum(line.startswith("models ") for line in err.splitlines()) == len(runs) - 1
    assert f"1 of {len(runs)} models failed" in err and not (out / "pareto.json").exists()


def test_emit_jobs_writes_one_command_per_model_and_a_slurm_array(tmp_path: Path, capsys):
    out = tmp_path / "array"
    assert sweep.main([*SWEEP, "--out", str(out), "--emit-jobs"]) == 0
    lines = (out / "jobs.txt").read_text().splitlines()
    names = [f"search-b{b:g}-s0" for b in BUDGETS] + [f"base-w{GRID[0]}-d{GRID[1]}-s0"]
    assert lines == [f"python -m search.sweep --out {out.resolve()} --job {n}" for n in names]
    slurm = (out / "jobs.slurm").read_text()
    assert f"#SBATCH --array=0-{len(names) - 1}" in slurm and "SLURM_ARRAY_TASK_ID" in slurm
    assert not (out / "runs").exists()  # nothing ran
    assert sweep.main(["--out", str(out), "--job", "search-b9-s0"]) == 2
    assert "--job search-b9-s0: not a model of" in capsys.readouterr().err


@pytest.mark.slow
def test_default_budgets_the_search_cannot_reach_are_left_out_with_a_note(
        tmp_path: Path, capsys, local_latency_table: Path):
    """In milliseconds, digits' (8x8) cheapest network costs about half the base (the bundled
    latency table's figure over the base's time, measured once by the sweep): the default
    budgets below that are dropped, named in one note with the reachable range; the base family
    follows the rest. Given budgets are not dropped: an unreachable one is an error."""
    out = tmp_path / "latency"
    args = ["--task", "digits", "--cost", "latency", "--latency-table", str(local_latency_table),
            "--emit-jobs"]
    assert sweep.main([*args, "--out", str(out)]) == 0
    plan = json.loads((out / "sweep.json").read_text())
    err = capsys.readouterr().err
    low, high = (float(v) for v in re.search(r"budgets from ([\d.]+) to ([\d.]+) of the base's "
                                             r"time \(.* ms at batch 1 in the latency table's "
                                             r"time, --base-ms\) are reachable",
                                             err).groups())
    assert 0.25 < low < 1 < high
    kept = [b for b in (0.125, 0.25, 0.5, 1.0) if b >= low]
    dropped = ", ".join(f"{b:g}" for b in (0.125, 0.25, 0.5, 1.0) if b < low)
    assert plan["budgets"] == kept
    assert plan["base_grid"] == [[round(32 * math.sqrt(b)), 4] for b in kept if b < 1] + [
        [32, 4], [32, 2]]
    assert f"note: default budget(s) {dropped} left out: " in err
    # the base was timed once, before any job: every search's budget is a share of that
    base_ms = plan["base_ms"]
    assert len(base_ms) == 2 and 0 < base_ms[0] < base_ms[1]
    for model in sweep.models(plan):
        flags = sweep.run_of(model, plan, out).flags
        given = [float(flags[i + 1]) for i, f in enumerate(flags) if f == "--base-ms"]
        assert given == (base_ms if model.kind == "search" else [])  # the base measures nothing
    assert sweep.main([*args, "--budgets", "0.25,1", "--out", str(tmp_path / "given")]) == 2
    err = capsys.readouterr().err
    assert "--budget 0.25: no network the search can reach costs that much" in err
    assert not (tmp_path / "given").exists()


def test_default_budgets_where_the_search_space_has_nothing_left_are_left_out(tmp_path: Path,
                                                                               capsys):
    """Under --cost macs, budgets below --crop-min-budget learn no R, so a sweep of --learn R
    keeps budget 1 alone and says why the others went (search.resolve.learned, per budget)."""
    out = tmp_path / "r"
    assert sweep.main(["--task", "ucr:GunPoint", "--learn", "R", "--emit-jobs", "--out",
                       str(out)]) == 0
    assert json.loads((out / "sweep.json").read_text())["budgets"] == [1.0]
    assert ("note: default budget(s) 0.125, 0.25, 0.5 left out: --learn R: --budget 0.125 is "
            "under --crop-min-budget 1") in capsys.readouterr().err


# --- bad input: one line, status 2, before any run, nothing written -----------------------------

TINY = ["--depth", "1", "--width", "4", "--epochs", "1"]


@pytest.mark.parametrize("args, message", [
    (["--budgets", "0.5,-1"], "--budgets: every budget must be a positive number"),
    (["--budgets", "0,0.5"], "got 0 in '0,0.5'"),
    (["--budgets", ""], "--budgets '' is empty"),
    (["--budgets", " , "], "is empty"),
    (["--budgets", "half"], "expected comma-separated numbers"),
    (["--task", "ucr:NoSuchSet"], "--task ucr:NoSuchSet:"),
    (["--budgets", "0.5", "--base-grid", "8by2"], "--base-grid: '8by2' is not WIDTHxDEPTH"),
    (["--budgets", "0.5", "--seed", "3"], "--seed is set by the sweep"),
    (["--budgets", "0.5", "--lr", "-1"], "--lr must be > 0"),
    (["--budgets", "0.5", "--jobs", "0"], "--jobs must be >= 1"),
    (["--budgets", "0.5", "--export-flags=--no-tune --bogus"],
     "--export-flags --no-tune --bogus: python -m export.onnx says: "),
])
def test_bad_input_is_refused_before_any_run(tmp_path: Path, capsys, args, message):
    out = tmp_path / "sweep"
    assert sweep.main([*args, *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.slow  # the sweep fixture trains and exports a whole sweep
def test_existing_dir_is_refused_unless_resumed_with_the_same_settings(sweep_dir: Path,
                                                                      tmp_path: Path, capsys):
    before = {p: p.stat().st_mtime_ns for p in sweep_dir.rglob("*") if p.is_file()}
    assert sweep.main([*SWEEP, "--out", str(sweep_dir)]) == 2
    assert "exists (a sweep); pass --resume" in capsys.readouterr().err
    assert sweep.main(["--task", "ucr:ItalyPowerDemand", "--out", str(sweep_dir), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "made with other settings: --task (saved 'ucr:GunPoint', given " in err
    assert sweep.main(["--out", str(sweep_dir), "--resume", "--width", "8"]) == 2
    assert "search flags (saved [" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in sweep_dir.rglob("*") if p.is_file()} == before
    other = tmp_path / "not-a-sweep"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert sweep.main([*SWEEP, "--out", str(other), "--resume"]) == 2
    assert "is not a sweep directory (no sweep.json)" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]

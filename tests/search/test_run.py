"""search.run end to end: the run directory contract, refusal to overwrite, bad input."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

from dnarch_deploy import Architecture
from dnarch_deploy import rundir as R
from dnarch_deploy.cost import architecture_cost
from search.config import SearchConfig, build_parser
from search.train import _is_better

from .conftest import TINY, run_search


def test_run_directory_has_every_file_and_key(tiny_run):
    for name in (R.CONFIG, R.METRICS, R.ARCHITECTURES, R.ARCHITECTURE, R.SUMMARY,
                 R.BEST_WEIGHTS, R.LAST_WEIGHTS):
        assert (tiny_run / name).is_file(), name
    config = R.read_config(tiny_run)
    assert config["task"] == "ucr:GunPoint" and config["seed"] == 0
    assert config["model"]["learn"] == "KRWD" and config["model"]["depth"] == 1
    assert {"python", "torch"} <= set(config["versions"])
    summary = R.read_summary(tiny_run)
    assert summary["metric_name"] == "accuracy" and 0.0 <= summary["test_metric"] <= 1.0
    # the summary's MACs are the cost model evaluated on the saved architecture
    assert math.isclose(summary["macs"], architecture_cost(R.read_architecture(tiny_run)))


def test_metrics_and_snapshots_one_per_epoch(tiny_run):
    rows = R.read_jsonl(tiny_run / R.METRICS)
    for split in ("train", "val"):
        assert [r["epoch"] for r in rows if r["split"] == split] == [0, 1, 2]
    train = [r for r in rows if r["split"] == "train"]
    assert all(r["loss"] >= r["loss_obj"] >= 0 and r["complexity_ratio"] > 0 for r in train)
    assert [r["step"] for r in train] == [5, 10, 15]  # 40 training samples, batch 8: 5 steps
    test = [r for r in rows if r["split"] == "test"]
    assert len(test) == 1 and test[0]["accuracy"] == R.read_summary(tiny_run)["test_metric"]
    snapshots = R.read_architectures(tiny_run)
    assert [a.epoch for a in snapshots] == [0, 1, 2]
    assert all(isinstance(a, Architecture) for a in snapshots)


def test_result_is_the_best_epoch_within_the_budget(tiny_run):
    """summary.json reports the best validation epoch among those whose network costs at most
    (1 + budget_tolerance) C_target (all epochs if none does); ties go to the later epoch."""
    tol = R.read_config(tiny_run)["train"]["budget_tolerance"]
    val = [r for r in R.read_jsonl(tiny_run / R.METRICS) if r["split"] == "val"]
    fits = [r for r in val if r["complexity_ratio"] <= 1 + tol]
    expected = max(fits or val, key=lambda r: (r["metric"], -r["loss"], r["epoch"]))
    summary = R.read_summary(tiny_run)
    assert summary["best_epoch"] == expected["epoch"]
    assert summary["within_budget"] == bool(fits)


def test_an_epoch_within_the_budget_beats_any_over_it():
    higher = True
    assert _is_better(0.5, 1.0, True, None, higher)  # the first round is always a result
    assert _is_better(0.5, 1.0, False, None, higher)
    assert _is_better(0.5, 1.0, True, (0.9, 0.1, False), higher)  # fits beats better over budget
    assert not _is_better(0.99, 0.1, False, (0.5, 1.0, True), higher)  # over never replaces fit
    assert _is_better(0.9, 1.0, False, (0.5, 0.1, False), higher)  # both over: the metric decides
    assert _is_better(0.5, 0.3, True, (0.5, 0.4, True), higher)  # metric tie: the lower loss
    assert not _is_better(0.5, 0.5, True, (0.5, 0.4, True), higher)
    assert _is_better(0.5, 0.4, True, (0.5, 0.4, True), higher)  # full tie: the later round
    assert not _is_better(0.4, 0.1, True, (0.5, 0.4, True), higher)
    assert _is_better(0.1, 0.4, True, (0.2, 0.1, True), False)  # lower is better (rel_l2)


def test_checkpoints_load_with_weights_only(tiny_run):
    state_dirs = sorted((tiny_run / R.CHECKPOINTS).glob("epoch-*"))
    assert [d.name for d in state_dirs] == ["epoch-00002"]  # older ones are removed
    state = torch.load(state_dirs[0] / "state.pt", weights_only=True)
    assert state["epoch"] == 2 and state["step"] == 15
    weights = load_file(str(state_dirs[0] / "model.safetensors"))
    last = load_file(str(tiny_run / R.LAST_WEIGHTS))
    assert weights.keys() == last.keys()
    assert all(torch.equal(weights[k], last[k]) for k in weights)


def test_load_run_gives_the_trained_model(tiny_run):
    run = R.load_run(tiny_run)
    assert not run.model.training
    x = torch.as_tensor(run.task.x_test[:4])
    assert run.model(x).shape == (4, 2)
    assert run.summary["task"] == "ucr:GunPoint"


def test_existing_run_dir_is_refused_and_untouched(tiny_run):
    before = {p: p.stat().st_mtime_ns for p in tiny_run.rglob("*")}
    proc = run_search(*TINY, "--out", str(tiny_run), check=False)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr and "--resume" in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in tiny_run.rglob("*")} == before


def test_bad_input_gives_one_clear_message(tmp_path):
    cases = [
        (["--task", "nosuchtask"], "nosuchtask"),
        (["--budget", "0"], "--budget"),
        (["--budget", "-1"], "--budget"),
        (["--learn", "XYZ"], "--learn"),
        (["--learn", "none", "--budget", "0.5"], "--budget"),
        (["--epochs", "0"], "--epochs"),
        (["--device", "cuda"] if not torch.cuda.is_available() else ["--device", "tpu"],
         "--device"),
        (["--task-option", "oops"], "--task-option"),
        (["--budget-tolerance", "-0.1"], "--budget-tolerance"),
    ]
    for args, needle in cases:
        out = tmp_path / "never"
        proc = run_search(*args, "--out", str(out), check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not out.exists()


def test_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_search(*TINY, "--out", str(blocker / "run"), check=False)
    assert proc.returncode == 2 and "cannot write" in proc.stderr
    assert blocker.read_text() == "not a directory"


def test_resume_of_a_damaged_checkpoint_is_refused(tiny_run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    (copy / R.SUMMARY).unlink()  # pretend it was cut short
    state = next((copy / R.CHECKPOINTS).glob("epoch-*")) / "state.pt"
    state.write_bytes(state.read_bytes()[:100])
    before = state.read_bytes()
    proc = run_search("--out", str(copy), "--resume", check=False)
    assert proc.returncode == 2 and "state.pt" in proc.stderr and "damaged" in proc.stderr
    assert state.read_bytes() == before


def test_resume_rejects_contradicting_flags(tiny_run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    proc = run_search("--out", str(copy), "--resume", "--lr", "0.5", check=False)
    assert proc.returncode == 2 and "--lr" in proc.stderr


def test_every_config_field_is_a_documented_flag():
    parser = build_parser()
    flags = {a.dest: a for a in parser._actions}
    for name in SearchConfig.__dataclass_fields__:
        assert name in flags and flags[name].help, name
    assert json.dumps(SearchConfig().to_dict())  # serialisable for config.json


def test_denormals_are_flushed_on_every_intra_op_thread():
    """flush_denormals, called before torch's first parallel operation (as search.run does), also
    holds in the threads torch starts later: a product that would be denormal is zero on every
    chunk of a tensor large enough to be split across 2 threads."""
    code = (
        "import torch\n"
        "from search.train import flush_denormals\n"
        "flush_denormals()\n"
        "torch.set_num_threads(2)\n"
        "x = torch.full((1 << 20,), 1e-37)\n"
        "print(int(((x * 0.01) != 0).sum()), int(((x * 10.0) != 0).sum()))\n"
    )
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.split()
    assert out == ["0", str(1 << 20)]  # denormal results flushed; normal ones untouched

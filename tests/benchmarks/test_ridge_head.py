"""python -m benchmarks.ridge_head on a tiny trained run, through the command line: the trained
head's accuracy is summary.json's, the refits learn from the features, the table is written as
printed; bad input is one line and exit 2, before any refit."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

from benchmarks import ridge_head as H
from dnarch_deploy import rundir as R
from search.tasks import load_task
from tests.benchmarks.scripts import run

from ..search.conftest import TINY, env, run_search


def ridge_head(*args: str) -> subprocess.CompletedProcess:
    return run("ridge_head", *args, env=env(), timeout=600)


@pytest.mark.slow
def test_a_run_refit_beside_its_shipped_head(tmp_path):
    run = tmp_path / "gp"
    run_search(*TINY, "--out", str(run))
    results = tmp_path / "table.md"
    proc = ridge_head(str(run), "--results", str(results))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text()
    assert text == proc.stdout.rstrip("\n") + "\n"
    (row,) = [line for line in text.splitlines() if line.startswith("| gp |")]
    task, shipped = [c.strip() for c in row.strip("|").split("|")][1:3]
    assert task == "ucr:GunPoint"
    # the head on the pooled features is the shipped network: it scores what search.run reported
    assert shipped == f"{R.read_summary(run)['test_metric']:.3f}"
    (set_row,) = [line for line in text.splitlines() if line.startswith("| ucr:GunPoint |")]
    assert set_row.split("|")[2].strip() == "1"  # one run

    # The refit learns from the features, not from the head: with the head zeroed the shipped
    # network predicts class 0 everywhere, and the same features refit score far above that.
    headless = tmp_path / "headless"
    shutil.copytree(run, headless)
    for weights in (headless / R.LAST_WEIGHTS, headless / R.BEST_WEIGHTS):
        if weights.exists():
            state = load_file(str(weights))
            save_file({k: torch.zeros_like(v) if k.startswith("dec_") else v
                       for k, v in state.items()}, str(weights))
    proc = ridge_head(str(headless))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("| headless |")]
    shipped, train, train_val = (float(c) for c in row.strip("|").split("|")[2:])
    y_test = load_task("ucr:GunPoint", seed=0).y_test
    assert shipped == round(float((y_test == 0).mean()), 3)
    assert min(train, train_val) > shipped + 0.15

    # every run is loaded before any refit: a bad one after a good one is one line, no table
    proc = ridge_head(str(run), str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: {tmp_path / 'nowhere'}: run directory not found"


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    missing = ridge_head(str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"error: {tmp_path / 'nowhere'}: run directory not found"
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / R.CONFIG).write_text("{}")
    proc = ridge_head(str(unfinished), "--results", str(tmp_path / "t.md"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {unfinished}: no summary.json (the run has not finished)"
    assert not (tmp_path / "t.md").exists()


@pytest.mark.slow
def test_every_block_features_end_with_the_last_blocks(tmp_path):
    """--blocks every: each block's output pooled as the head pools the trunk's, in block order;
    the last block's output is the trunk's, so the head's own features end every row exactly,
    and the logits are the trained head's either way."""
    run_dir = tmp_path / "deep"
    run_search("--task", "ucr:GunPoint", "--depth", "2", "--width", "4", "--batch-size", "8",
               "--epochs", "2", "--eval-batch-size", "64", "--out", str(run_dir))
    model = R.load_run(run_dir).model.eval()
    x = load_task("ucr:GunPoint", seed=0).x_test[:16]
    x = torch.as_tensor(x, dtype=torch.float32)
    last, logits = H.pooled_features(model, x)
    every, logits_every = H.pooled_features(model, x, every_block=True)
    blocks = len(model.plan().blocks)
    assert blocks >= 2
    assert every.shape == (16, blocks * last.shape[1])
    assert (every[:, -last.shape[1]:] == last).all()
    assert not (every[:, : last.shape[1]] == last).all()  # the first block's differ
    torch.testing.assert_close(logits_every, logits, rtol=0, atol=0)
    torch.testing.assert_close(logits, model(x), rtol=1e-6, atol=1e-6)
    assert model.blocks[0]._forward_hooks == {}  # the hooks are gone

"""benchmarks.crop_cost: the resampling it counts is the lowered network's, its FFT pricing
the closed form, a run's row its own summary; a path that is not a finished run is refused."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.crop_cost import resampling_macs, run_row
from dnarch_deploy import DNArch, ModelConfig, describe
from dnarch_deploy import masks as M
from dnarch_deploy import rundir as R
from dnarch_deploy.cost import architecture_operators
from tests.benchmarks.scripts import run
from tests.search.conftest import TINY, run_search


def test_resampling_is_the_lowered_operators_and_its_fft_price_the_closed_form():
    model = DNArch(ModelConfig(in_channels=1, out_channels=2, input_size=(150,), depth=2,
                               width=8, learn="R"))
    with torch.no_grad():  # the first block at about half the input, the second at full
        model.mask_res[0, 0] = M.sigmoid_mu_for_size(0.5, model.config.tau_resolution, 1)
    arch = describe(model)
    r = arch.blocks[0].resolution[0]
    assert r < 150 and arch.blocks[1].resolution == [150]
    ops = architecture_operators(arch)
    exported, reference = resampling_macs(arch)
    assert exported == sum(op.macs for name, op in ops[0].items() if name in ("down0", "up0"))
    fft = 1.25 * (150 * math.log2(150) + r * math.log2(r))  # an rfft at 150, an irfft at r
    assert reference == pytest.approx((8 + 8) * fft, rel=1e-12)  # down (8 lines), up (8)
    assert reference < exported / 5  # a dense (150 x r) matrix per line, each way


@pytest.mark.slow
def test_a_runs_row_is_its_summary(tmp_path):
    run = tmp_path / "run"
    run_search(*TINY, "--learn", "KRWD", "--out", str(run))
    row = run_row(run)
    summary = R.read_summary(run)
    assert row["cost"] == pytest.approx(summary["complexity_ratio"], rel=1e-9)
    assert row["test"] == summary["test_metric"]
    assert row["key"] == ("ucr:GunPoint", "KRWD", "bin", 5.0, 1.0)
    assert 0 <= row["share"] < 1 and row["without"] <= row["cost"]


@pytest.mark.slow
def test_a_path_that_is_not_a_finished_run_is_refused(tmp_path):
    out = tmp_path / "out.md"
    proc = run("crop_cost", tmp_path / "nope", "--out", out, timeout=120)
    assert proc.returncode == 2 and str(tmp_path / "nope") in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.slow
def test_a_damaged_run_is_one_message_and_no_report(tmp_path):
    run_dir = tmp_path / "run"
    run_search(*TINY, "--learn", "KRWD", "--out", str(run_dir))
    (run_dir / R.ARCHITECTURE).write_text("{not json")
    out = tmp_path / "out.md"
    proc = run("crop_cost", run_dir, "--out", out, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error:")
    assert "architecture.json" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()

"""Stage 1: calibration sets exactly the population statistics of the calibration batches."""

from __future__ import annotations

import pytest
import torch

from dnarch_deploy.calibration import RunningMoments, calibrate, norms_in_use

from .export_cases import random_input, random_model


def eval_inputs(model, norm, batches) -> torch.Tensor:
    """Everything ``norm`` receives in the calibrated model's eval forward, as (C, values)."""
    seen = []
    handle = norm.register_forward_pre_hook(lambda m, args: seen.append(args[0].double()))
    with torch.no_grad():
        for x in batches:
            model(x)
    handle.remove()
    x = torch.cat(seen)
    return x.transpose(0, 1).reshape(x.shape[1], -1)


@pytest.mark.parametrize("seed", [0, 3, 4, 7, 21, 34, 55])
def test_calibration_sets_population_statistics_of_the_deployed_inputs(seed):
    model = random_model(seed)
    batches = [random_input(model, n, seed=i) for i, n in enumerate((5, 3, 8))]
    calibrate(model, batches, show_progress=False)
    for norm in norms_in_use(model):
        x = eval_inputs(model, norm, batches)
        n = x.shape[0]
        assert bool(norm.calibrated)
        torch.testing.assert_close(norm.running_mean[:n].double(), x.mean(1), rtol=0, atol=1e-6)
        var = x.var(1, unbiased=False)
        torch.testing.assert_close(norm.running_var[:n].double(), var, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 55, 4])
def test_norm_sees_the_stream_slice_it_uses(seed):
    """Width learned: narrow blocks inside a wider stream. A block's norm has n_in channels."""
    model = random_model(seed)
    plan = model.plan()
    calibrate(model, [random_input(model, 4)], show_progress=False)
    widths = [model.enc_norm] + [model.blocks[p.index].norm for p in plan.blocks]
    sizes = [plan.stream] + [p.n_in for p in plan.blocks]
    assert any(n < plan.stream for n in sizes[1:])  # a narrow block reads part of the stream
    assert widths == norms_in_use(model)
    for norm, n in zip(widths, sizes):
        before = norm.running_mean.clone()
        calibrate(model, [random_input(model, 4, seed=9)], show_progress=False)
        assert torch.equal(norm.running_mean[n:], before[n:])  # channels not in use untouched


def test_running_moments_merge_batches_exactly():
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, 3, 7, generator=g) * 5 + 100 for n in (1, 4, 9)]
    moments = RunningMoments()
    for p in parts:
        moments.update(p)
    x = torch.cat(parts).double().transpose(0, 1).reshape(3, -1)
    torch.testing.assert_close(moments.mean, x.mean(1), rtol=0, atol=1e-12)
    torch.testing.assert_close(moments.variance, x.var(1, unbiased=False), rtol=1e-12, atol=0)


def test_calibration_needs_batches():
    with pytest.raises(ValueError, match="at least one batch"):
        calibrate(random_model(0), [], show_progress=False)

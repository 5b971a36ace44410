"""export.base_latency: the base network a --cost latency budget is measured against."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dnarch_deploy import DNArch, ModelConfig, describe
from export.base_latency import base_milliseconds, calibrated, random_inputs, untrained_export
from export.timing import session

CASES = {
    "1d": dict(in_channels=2, out_channels=3, input_size=(24,)),
    "2d": dict(in_channels=1, out_channels=4, input_size=(8, 8)),
    "tokens": dict(in_channels=4, out_channels=2, input_size=(20,), vocab_size=7),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_untrained_export_computes_what_the_model_computes(case):
    """The graph timed is the calibrated network as export ships it: onnxruntime agrees with
    the model in eval mode on fresh inputs, and the architecture is the one the masks describe."""
    model = calibrated(DNArch(ModelConfig(**case, depth=2, width=8, learn="KRWD")))
    graph, architecture = untrained_export(model)
    assert architecture == describe(model)
    x = random_inputs(model.config, 5, torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x).numpy()
    got = session(graph, 1).run(None, {graph.graph.input[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_the_base_is_timed_at_each_batch_without_touching_the_seeded_generator():
    """One median per batch, in order, the larger batch the longer; the search's torch seed
    draws the same numbers after the measurement as without it."""
    config = ModelConfig(**CASES["1d"], depth=2, width=8, learn="KRWD")
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    times = base_milliseconds(config, [1, 64], repeats=8)
    assert len(times) == 2 and 0 < times[0] < times[1]
    assert torch.equal(torch.rand(4), expected)


def test_the_command_prints_the_base_milliseconds_and_refuses_a_bad_config():
    """``python -m export.base_latency``, as search.run runs it: one JSON line with a time per
    batch; a config that is not one is one argparse error, exit 2."""
    import json
    import subprocess
    import sys

    model = ModelConfig(**CASES["1d"], depth=1, width=4, learn="KRWD").to_dict()
    cmd = [sys.executable, "-m", "export.base_latency", "--model", json.dumps(model),
           "--batch", "1", "--batch", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    times = json.loads(proc.stdout)["base_ms"]
    assert len(times) == 2 and all(t > 0 for t in times)
    bad = subprocess.run([*cmd[:3], "--model", '{"width": 4}', "--batch", "1"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--model: not a model config" in bad.stderr

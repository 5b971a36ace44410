"""benchmarks.cnn_ablation: the ladder from the FCN peer toward the CCNN."""

import os

import pytest

from benchmarks import cnn_ablation as A
from benchmarks import ucr_quality as U
from tests.benchmarks.scripts import ROOT, run


@pytest.mark.slow
def test_the_first_rung_is_the_fcn_peer_itself():
    """Same task, seed and steps: the ladder's first rung gives the FCN column's figure."""
    assert A.fit("fcn", "ucr:GunPoint", 0, 40)[0] == U.fcn("ucr:GunPoint", 0, 40)[0]


def test_each_rung_changes_the_one_above_toward_the_ccnn():
    """The named change and nothing else; every rung maps (B, C, L) to (B, classes)."""
    import torch

    changes = {"depthwise": {"conv"}, "search optimiser": {"act", "lr", "weight_decay"},
               "ccnn blocks": {"block", "kernels", "width"}, "avg+max pool": {"pool"},
               "long kernels": {"kernels"},
               # the rungs that split a step change the rung SPLITS names
               "32x4 stack": {"kernels", "width", "stack"}, "norm after kernel": {"block"},
               "norm after mixing": {"block"}, "final gelu": {"block"},
               "conv encoder": {"encoder"}, "residual stack": {"block", "encoder"},
               "conv encoder, long": {"kernels"}, "residual stack, long": {"kernels"}}
    ladder = [name for name in A.RUNGS if name not in A.SPLITS]
    for above, rung in [*zip(ladder, ladder[1:]), *((a, r) for r, a in A.SPLITS.items())]:
        a, b = vars(A.RUNGS[above]), vars(A.RUNGS[rung])
        assert {k for k in a if a[k] != b[k]} == changes[rung], rung
    for name, rung in A.RUNGS.items():
        net = A.build(rung, in_channels=3, classes=5, length=64)
        assert net(torch.randn(2, 3, 64)).shape == (2, 5), name
    # depthwise-separable after the first layer: on one input channel a depthwise first layer
    # would be a single filter, where the CCNN's encoder lifts the input to many channels first
    convs = [m for m in A.build(A.DEPTHWISE, 1, 5, 64).modules() if isinstance(m, torch.nn.Conv1d)]
    assert [(c.in_channels, c.out_channels, c.groups, c.kernel_size) for c in convs] == [
        (1, 64, 1, (8,)), (64, 64, 64, (5,)), (64, 128, 1, (1,)), (128, 128, 128, (3,)),
        (128, 64, 1, (1,))]
    stack = A.build(A.RUNGS["32x4 stack"], 1, 5, 64)
    assert [m.num_features for m in stack.modules() if isinstance(m, torch.nn.BatchNorm1d)] \
        == [32] * 4
    x = torch.randn(4, 32, 64)
    gelu = torch.nn.GELU()
    for name in ("ccnn blocks", "norm after kernel", "norm after mixing", "final gelu",
                 "residual stack"):
        b = A.build(A.RUNGS[name], 1, 5, 64)[3].eval()  # the first residual block
        if name == "residual stack":  # the stack's layer with a skip, no second mixing
            assert torch.allclose(b(x), x + gelu(b.norm(b.w1(b.conv(x))))), name
            continue
        if name == "norm after kernel":
            z = b.w1(b.norm(b.conv(x)))
        elif name == "norm after mixing":
            z = b.norm(b.w1(b.conv(x)))
        else:
            z = b.w1(b.conv(b.norm(x)))
        branch = b.w2(gelu(z))
        if name == "final gelu":
            branch = gelu(branch)
        assert torch.allclose(b(x), x + branch), name
    # a conv encoder is the stack's first layer: a full convolution of the first kernel's taps,
    # then a block for each further kernel, so the depth is the stack's
    for name in ("conv encoder", "residual stack"):
        net = A.build(A.RUNGS[name], 1, 5, 64)
        first = net[0]
        assert (first.in_channels, first.out_channels, first.kernel_size) == (1, 32, (9,)), name
        assert [m.conv.kernel_size for m in net if type(m).__name__ == "Block"] == [
            (5,), (3,), (9,)], name
    # long: the blocks' kernels a quarter of the input (17 taps of 64), the first layer's 9
    for name in ("conv encoder, long", "residual stack, long"):
        net = A.build(A.RUNGS[name], 1, 5, 64)
        assert net[0].kernel_size == (9,), name
        assert [m.conv.kernel_size for m in net if type(m).__name__ == "Block"] == [(17,)] * 3
    long = A.build(A.LONG, 3, 5, 64)
    assert [m.kernel_size for m in long.modules() if getattr(m, "groups", 1) > 1] == [(17,)] * 4


@pytest.mark.slow
def test_a_run_writes_one_row_a_rung(tmp_path):
    out = tmp_path / "ablation.md"
    proc = run("cnn_ablation", "--tasks", "ucr:GunPoint", "--seeds", "1", "--steps", "5",
               "--rungs", "fcn", "ccnn blocks", "--out", out, timeout=600, cwd=ROOT,
               env={**os.environ, "CI": "1"})
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ")]
    assert rows[0] == "| rung | ucr:GunPoint | s/fit |"
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| fcn", "| ccnn blocks"]


@pytest.mark.slow
@pytest.mark.parametrize("flags, says", [
    (["--tasks", "ucr:Nope"], "no bundled set named 'Nope'"),
    (["--tasks", "digits"], "digits: the ladder is of 1-D networks"),
    (["--seeds", "0"], "--seeds, --steps and --jobs must be at least 1"),
])
def test_bad_input_is_refused_before_any_fit(tmp_path, flags, says):
    out = tmp_path / "ablation.md"
    proc = run("cnn_ablation", *flags, "--out", out, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and says in proc.stderr.splitlines()[-1]
    assert not out.exists()

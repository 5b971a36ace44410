"""`python -m export.latency_table`: measure this machine's per-operator latency table.

Every operator kind of :data:`dnarch_deploy.latency.KINDS` is built as the module export lowers
it to (a 1x1 layer as :func:`export.static.pointwise`, GELU, an Add, the convolution tactics of
:mod:`export.tactics`, the resampling forms of :mod:`export.resampling`) on a grid of sizes that
covers what CCNNs use (1-D lengths 16..4096, 2-D 8x8..64x64, 8..256 channels; each point records
its number of spatial axes, which the table predicts by), exported to ONNX as export does (batch
dynamic; a few cases per graph, each cut out as its own sub-model) and timed in onnxruntime
(export.timing) at each batch, alone or (``--context N``) as N chained copies (:func:`in_context`),
less the fixed cost of a call (the header's ``overhead_ms``: :func:`call_overhead`), which a
network pays once. Each point's MACs per
sample come from the formulas export and the cost model share
(:mod:`dnarch_deploy.operators`: ``conv_macs``, ``resample_macs``;
:func:`dnarch_deploy.cost.linear_cost` and ``pointwise_cost``). Points that would take long
(MAX_CALL_MACS, MAX_CALL_MS) are left out: the table extrapolates proportionally to MACs there.

The table goes to this machine's cache file (:func:`dnarch_deploy.latency.cache_path`), where
:func:`dnarch_deploy.latency.load_table` finds it, or to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from dnarch_deploy.cli import add_fields
from dnarch_deploy.cost import linear_cost, pointwise_cost
from dnarch_deploy.latency import (
    DEFAULT_BATCHES,
    KINDS,
    LatencyTable,
    Point,
    cache_path,
    make_header,
)
from dnarch_deploy.operators import conv_macs, conv_period, resample_candidates, resample_macs
from dnarch_deploy.progress import Progress
from dnarch_deploy.spectral import conv_fft_sizes, next_fast_len

from .emit import to_onnx
from .resampling import lower_resample
from .static import Resample, pointwise
from .tactics import distinct_tactics, make_conv
from .timing import layer_boundaries, layers, measure, random_feeds, runner, session
from .timing import sub_model as cut

# Larger calls add minutes and little information: there time grows in proportion to MACs, which
# is how the table extrapolates. About 30 ms at 10 GMAC/s.
MAX_CALL_MACS = 3e8
MAX_CALL_MS = 300.0  # and a case whose previous batch, scaled, would take longer
TIME_PER_POINT_MS = 100.0  # timed calls per point, about
# operators per export: the exporter's graph rewrites grow faster than the graph (one export per
# kind of chains of four ran for over half an hour), and an export costs about a second
OPS_PER_EXPORT = 32


@dataclass
class TableOptions:
    threads: int = 1  # onnxruntime intra-op threads
    batch: list[int] = field(default=None, metadata={"help": (
        "a batch size to measure; repeat the flag (--batch 1 --batch 32); default 1 and 32")})
    out: str | None = None  # the table's file (default: this machine's cache file)
    quick: bool = False  # a few small sizes only (seconds; for tests)
    # 1, not 4: chains of four priced the base CCNN hardly better and 2-D networks worse
    # (docs/benchmark_record.md)
    context: int = field(default=1, metadata={"help": (
        "time each operator as this many chained copies, each one's input the output of the one "
        "before (a resampling alternating with the one that undoes it), a point being its share "
        "of the chain's time; 1: alone; else even")})

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {self.threads}")
        if self.context < 1 or (self.context > 1 and self.context % 2):
            raise ValueError(f"--context must be 1 or an even number, got {self.context}")
        self.batch = sorted(set(self.batch or DEFAULT_BATCHES))
        if self.batch[0] < 1:
            raise ValueError(f"every --batch must be >= 1, got {self.batch}")


# --- the operators --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One operator at one size: ``channels`` x ``size`` in; ``taps`` for a convolution,
    ``out`` for a resampling (the new length of spatial axis ``axis``)."""

    kind: str
    channels: int
    size: tuple[int, ...]
    taps: tuple[int, ...] = ()
    out: int = 0
    axis: int = 0
    period: tuple[int, ...] = ()  # a periodic kernel's circular lengths (operators.conv_period)

    def __str__(self) -> str:
        extra = f" taps={self.taps}" if self.taps else ""
        extra += f" period={self.period}" if self.period else ""
        if self.out:
            extra = f" ->{self.out}" + (f" on axis {self.axis}" if self.axis else "")
        return f"C={self.channels} S={self.size}{extra}"


class Linear(nn.Module):
    """A 1x1 layer as export's blocks compute it: one Conv node with its bias. (A block's first
    layer then adds its per-position bias map, an Add priced as ``add``.)"""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("weight", torch.randn(channels, channels) / math.sqrt(channels))
        self.register_buffer("bias", torch.randn(channels))

    def forward(self, x: Tensor) -> Tensor:
        return pointwise(x, self.weight, self.bias)


class AddMap(nn.Module):
    """A block's first-layer bias: a constant (C, *S) map added to every sample (the residual
    Add of two activations costs the same per element)."""

    def __init__(self, channels: int, size: tuple[int, ...]):
        super().__init__()
        self.register_buffer("bias", torch.randn(channels, *size))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.bias


class Copy(nn.Module):
    """What a block narrower than the stream adds to write its channels back: two Slices of the
    channels and a Concat (export.static.StaticBlock); its reading Slice is priced alike."""

    def forward(self, x: Tensor) -> Tensor:
        half = x.shape[1] // 2
        return torch.cat([x[:, :half], x[:, half:]], dim=1)


def global_taps(size: tuple[int, ...]) -> tuple[int, ...]:
    """A kernel as long as the input (odd), as the base CCNN's (ModelConfig.max_kernel)."""
    return tuple(s if s % 2 else s - 1 for s in size)


def folded_kernel(size: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(taps, period) of a full-resolution block's kernel with its resolution mask folded in:
    2 S - 1 taps, periodic in the training's FFT length (of a global kernel), which the MatMul
    FFTs run circularly (operators.conv_period)."""
    taps = tuple(2 * n - 1 for n in size)
    return taps, conv_period(size, taps, tuple(conv_fft_sizes(size, global_taps(size))))


def build(case: Case) -> nn.Module:
    """The module export lowers ``case`` to."""
    family, _, form = case.kind.partition(".")
    if case.kind == "linear":
        return Linear(case.channels)
    if case.kind == "pointwise":
        return nn.GELU()
    if case.kind == "add":
        return AddMap(case.channels, case.size)
    if case.kind == "copy":
        return Copy()
    if family == "conv":
        return make_conv(form, torch.randn(case.channels, *case.taps), case.size,
                         case.period or None)
    dim = case.axis - len(case.size)
    return lower_resample(Resample(case.out, dim), case.size[case.axis], form)


def back(case: Case) -> Case:
    """The resampling that undoes ``case``'s length change (out -> in on the same axis), in
    the same form where that form is offered."""
    n, m = case.size[case.axis], case.out
    form = case.kind.partition(".")[2]
    forms = resample_candidates(m, n)
    size = case.size[:case.axis] + (m,) + case.size[case.axis + 1:]
    return Case(f"resample.{form if form in forms else forms[0]}", case.channels, size,
                out=n, axis=case.axis)


# In a network an operator reads what the one before it wrote, beside other live buffers; alone,
# one on a large tensor ran faster (the base CCNN's global convolution at 251 samples, batch 32,
# took 1.5x its alone time in a chain of four; no change at 128 samples). --context times that.
def in_context(case: Case, context: int) -> nn.Module:
    """The module that times ``case``: its own (``context`` 1), or ``context`` copies chained; a
    resampling alternates with :func:`back`, which returns the length."""
    if context == 1:
        return build(case)
    if not case.out:
        return nn.Sequential(*(build(case) for _ in range(context)))
    return nn.Sequential(*(build(c) for _ in range(context // 2) for c in (case, back(case))))


def context_share(case: Case, context: int) -> float:
    """The share of :func:`in_context`'s time that is one ``case``: a pair of resamplings is
    split by their MACs."""
    if context == 1:
        return 1.0
    if not case.out:
        return 1 / context
    return macs(case) / (macs(case) + macs(back(case))) / (context // 2)


def macs(case: Case) -> float:
    """Multiply-accumulates per sample, by the formulas export reports."""
    family, _, form = case.kind.partition(".")
    length = math.prod(case.size)
    if case.kind == "linear":
        return float(linear_cost(length, case.channels, case.channels))
    if case.kind in ("pointwise", "add", "copy"):
        return float(pointwise_cost(length, case.channels))
    if family == "conv":
        return conv_macs(form, case.channels, case.size, case.taps, case.period or None)
    lines = case.channels * length // case.size[case.axis]
    return float(lines * resample_macs(form, case.size[case.axis], case.out))


def point_shape(case: Case) -> tuple[int, int, int]:
    """(width, positions, taps) the point of a convolution or linear layer records
    (dnarch_deploy.latency prices them by it); zeros for the other kinds."""
    if case.kind == "linear":
        return case.channels**2, math.prod(case.size), 1
    if case.kind.startswith("conv."):
        return case.channels, math.prod(case.size), math.prod(case.taps)
    return 0, 0, 0


def grid(quick: bool = False) -> dict[str, list[Case]]:
    """The cases measured, per kind (:data:`KINDS`): 1-D and 2-D sizes, a few channel counts."""
    lengths = (16, 256) if quick else (16, 64, 256, 1024, 4096)
    images = () if quick else ((8, 8), (16, 16), (32, 32), (64, 64))
    channels = (8,) if quick else (8, 16, 32, 64, 256)  # 32: the base CCNN_{4,32}
    sizes = [(n,) for n in lengths] + list(images)
    # resampling n -> m along an axis: halving and doubling, and a fast length just over n / 2
    pairs = dict.fromkeys(p for n in lengths for m in (n // 2, next_fast_len(n // 2 + 1))
                          for p in ((n, m), (m, n)))
    cases: dict[str, list[Case]] = {k: [] for k in KINDS}
    for c in channels:
        for s in sizes:
            cases["linear"].append(Case("linear", c, s))
            cases["pointwise"].append(Case("pointwise", c, s))
            cases["add"].append(Case("add", c, s))
            cases["copy"].append(Case("copy", c, s))
            short = tuple(min(9, t) for t in global_taps(s))
            for taps in dict.fromkeys((global_taps(s), short)):
                cases["conv.direct"].append(Case("conv.direct", c, s, taps=taps))
            # multistep only where it is not the four-step itself (export never ships it there)
            kernel = torch.zeros(c, *global_taps(s))
            for form in distinct_tactics(kernel, s, ("dense", "matmul", "dft", "multistep")):
                cases[f"conv.{form}"].append(Case(f"conv.{form}", c, s, taps=global_taps(s)))
            folded, period = folded_kernel(s)
            periodic = torch.zeros(c, *folded)
            for form in distinct_tactics(periodic, s, ("matmul", "multistep"), period):
                cases[f"conv.{form}"].append(Case(f"conv.{form}", c, s, taps=folded,
                                                  period=period))
            if len(s) == 2:  # an image's axes (up to 128 stay dense)
                cases["resample.dense"] += [Case("resample.dense", c, s, out=s[a] // 2, axis=a)
                                            for a in (0, 1)]
        for n, m in pairs:
            for form in resample_candidates(n, m):
                cases[f"resample.{form}"].append(Case(f"resample.{form}", c, (n,), out=m))
    assert all(cases.values())
    return cases


# --- measure --------------------------------------------------------------------------------------


class SideBySide(nn.Module):
    """Cases' modules (:func:`in_context`) side by side, one input each: one ONNX export for all
    of them."""

    def __init__(self, cases: list[Case], context: int = 1):
        super().__init__()
        self.ops = nn.ModuleList(in_context(c, context) for c in cases)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return tuple(op(x) for op, x in zip(self.ops, inputs))


def case_sessions(cases: list[Case], threads: int, context: int = 1) -> Iterator[tuple]:
    """(its ONNX graph, an onnxruntime session) of each case in turn, one session alive at a
    time: one export for all of them, each case's nodes cut out of it."""
    with torch.no_grad():
        model = to_onnx(SideBySide(cases, context).eval(),
                        tuple(torch.randn(2, c.channels, *c.size) for c in cases))
    groups = layers(model)
    for i in range(len(cases)):
        sub = cut(model, *layer_boundaries(model, groups[f"ops.{i}"]))
        yield sub, session(sub, threads)


def median_ms(fn, quick: bool = False) -> float:
    """Median milliseconds of ``fn`` (export.timing.measure) over about TIME_PER_POINT_MS of
    timed calls, 3 to 10 (a slow call is long enough to time with few)."""
    probe = measure([fn], repeats=1, warmup=1, rounds=1)[0]["median_ms"]
    repeats = 3 if quick else max(3, min(10, int(TIME_PER_POINT_MS / probe)))
    return measure([fn], repeats, warmup=0, rounds=1)[0]["median_ms"]


# a point keeps at least this share of its measured time when the call's fixed cost is taken off
MIN_OPERATOR_SHARE = 0.1


class Identity(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.clone()  # a graph needs a node: one Identity


# timed calls of the fixed cost: it is subtracted from every point, so its noise is every small
# point's (a median of 10 calls of 7 us moved it by 2.4 us between two tables, a third of it)
OVERHEAD_CALLS = 2000


def call_overhead(threads: int, batches: list[int], quick: bool = False) -> dict[str, float]:
    """Per batch, the median ms of a session call that runs one Identity node on a (batch, 1)
    input (OVERHEAD_CALLS calls in 4 rounds): the fixed cost every point's call includes and a
    network's call includes once."""
    model = to_onnx(Identity(), (torch.randn(2, 1),))
    sess = session(model, threads)
    calls = 20 if quick else OVERHEAD_CALLS
    timed = {b: measure([runner(sess, random_feeds(model, b))], calls)[0] for b in batches}
    return {str(b): float(f"{t['median_ms']:.4g}") for b, t in timed.items()}


# The channel counts a direct convolution is timed at to find onnxruntime's channel block, and
# the blocks told apart: 4 (export's own padding, operators.depthwise_channels) runs them in
# proportion, 8 as 16 24 24 32 32 40, 16 as 16 32 32 32 32 48, 32 as 32 32 32 32 32 64.
BLOCK_PROBE_CHANNELS = (16, 20, 24, 28, 32, 36)
CHANNEL_BLOCKS = (4, 8, 16, 32)


def block_probe_cases() -> list[Case]:
    """The direct convolution :func:`channel_block` times, at each of BLOCK_PROBE_CHANNELS."""
    return [Case("conv.direct", c, (256,), taps=(63,)) for c in BLOCK_PROBE_CHANNELS]


def channel_block(threads: int, quick: bool = False) -> int:
    """The block of channels onnxruntime runs a direct convolution in (its NCHWc layout;
    dnarch_deploy.latency): the candidate of :data:`CHANNEL_BLOCKS` whose padded channel counts
    best fit, in log time, a compute-bound direct convolution (63 taps on 256 samples, batch 32)
    timed at each of :data:`BLOCK_PROBE_CHANNELS`."""
    log_ms = [math.log(median_ms(runner(sess, random_feeds(sub, 32)), quick))
              for sub, sess in case_sessions(block_probe_cases(), threads)]

    def misfit(block: int) -> float:
        log_padded = [math.log(-(-c // block) * block) for c in BLOCK_PROBE_CHANNELS]
        offset = sum(t - p for t, p in zip(log_ms, log_padded)) / len(log_ms)
        return sum((t - p - offset) ** 2 for t, p in zip(log_ms, log_padded))

    return min(CHANNEL_BLOCKS, key=misfit)


def operator_ms(measured: float, overhead: float, share: float = 1.0) -> float:
    """``share`` of a call's milliseconds less its fixed cost (at least MIN_OPERATOR_SHARE of
    them): one operator's time in the chain :func:`in_context` timed."""
    return float(f"{max(measured - overhead, MIN_OPERATOR_SHARE * measured) * share:.4g}")


def wanted(case: Case, batch: int, previous: tuple[int, float] | None = None) -> bool:
    """Whether to time ``case`` at ``batch``: within MAX_CALL_MACS, and within MAX_CALL_MS by its
    ``previous`` (batch, ms) scaled to this batch."""
    if batch * macs(case) > MAX_CALL_MACS:
        return False
    return previous is None or previous[1] * batch / previous[0] <= MAX_CALL_MS


def measure_table(options: TableOptions, command: str) -> LatencyTable:
    """Build, export and time the cases of :func:`grid` at every batch of ``options`` that they
    are :func:`wanted` at; each kind's smallest case at every batch (every kind needs a point)."""
    per_kind = {k: sorted(cs, key=macs) for k, cs in grid(options.quick).items()}
    per_kind = {k: [c for c in cs if c is cs[0] or wanted(c, options.batch[0])]
                for k, cs in per_kind.items()}
    every = [c for cs in per_kind.values() for c in cs]
    step = max(1, OPS_PER_EXPORT // options.context)
    chunks = [every[i:i + step] for i in range(0, len(every), step)]
    overhead = call_overhead(options.threads, options.batch, options.quick)
    points: dict[int, dict[str, list[Point]]] = {b: {k: [] for k in KINDS} for b in options.batch}
    progress = Progress(len(every), "latency table", "case")
    for cases in chunks:
        progress.note(kind=cases[0].kind)  # a bar's description; in a log, one line a stage
        for case, (sub, sess) in zip(cases, case_sessions(cases, options.threads,
                                                               options.context)):
            previous = None
            for b in options.batch:
                if case is not per_kind[case.kind][0] and not wanted(case, b, previous):
                    break
                ms = median_ms(runner(sess, random_feeds(sub, b)), options.quick)
                axis = case.axis if case.out else None
                one = operator_ms(ms, overhead[str(b)], context_share(case, options.context))
                points[b][case.kind].append(Point(macs(case), one, str(case), len(case.size),
                                                  axis, *point_shape(case)))
                previous = (b, ms)
            progress.update()
    progress.close()
    header = {**make_header(options.threads, options.batch, command), "overhead_ms": overhead,
              "channel_block": channel_block(options.threads, options.quick),
              "context": options.context}
    return LatencyTable(header=header, points=points)


# --- command line ---------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m export.latency_table",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_fields(p, TableOptions)
    return p


def writable(path: Path) -> None:
    """Raise OSError now, not after minutes of measuring, when ``path`` cannot be written."""
    if not path.parent.is_dir():
        raise FileNotFoundError(f"directory {path.parent} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory")
    with tempfile.TemporaryFile(dir=path.parent):
        pass


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TableOptions)}
    command = " ".join(["python -m export.latency_table", *(sys.argv[1:] if argv is None
                                                            else argv)])
    try:
        options = TableOptions(**values)
        out = Path(options.out) if options.out else cache_path(options.threads)
        if not options.out:
            out.parent.mkdir(parents=True, exist_ok=True)
        writable(out)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    table = measure_table(options, command)
    try:
        table.save(out)
    except OSError as e:
        print(f"error: cannot write {out}: {e}", file=sys.stderr)
        return 1
    n = sum(len(p) for kinds in table.points.values() for p in kinds.values())
    print(f"latency table ({n} points, batches {options.batch}, {options.threads} threads) "
          f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-operator latency table: measured onnxruntime milliseconds, looked up by operator kind and
multiply-accumulates (ProxylessNAS / FBNet style).

The lowered network is a sum of operators, each a *kind* (:data:`KINDS`) with a MAC count per
sample; :meth:`LatencyTable.predict_ms` prices one of them at a batch size. ``python -m
export.latency_table`` measures a table on this machine and caches it; a default measured once
ships with the package (``dnarch_deploy/data/latency_default.json``).

The file is JSON::

    {"schema": "dnarch-deploy/latency-table/4",
     "header": {"cpu": "AMD EPYC", "cpu_count": 16, "threads": 1, "batches": [1, 32],
                "versions": {"onnxruntime": ..., "torch": ..., "onnx": ..., "python": "3.11",
                             "dnarch-deploy": ...},
                "date": "2026-01-01T00:00:00+00:00", "command": "python -m export.latency_table"},
     "points": {"1": {"linear": [{"macs": 1024.0, "ms": 0.011, "shape": "C=8 S=(16,)",
                                  "dims": 1, "axis": null, "width": 64, "positions": 16,
                                  "taps": 1}, ...],
                      ...every kind...},
                "32": {...}}}

``macs`` is per sample, ``ms`` the median wall-clock time of the whole batch, less the fixed cost
of a call: ``header["overhead_ms"]`` (per batch, optional) is the median time of a session
running one Identity node, subtracted from every point when measured (at most 90 % of a point)
and priced once per network (:meth:`LatencyTable.overhead`). Each point is its own session
call, and a network of 20 operators is one call: without the subtraction the table prices 20
calls' fixed cost (the bundled table's: 5.1 us at batch 1, more than most operators of a small
network take).

Prediction (:meth:`LatencyTable.predict_ms`): piecewise-linear in log(MACs)-log(ms) through the
kind's points at that batch measured on as many spatial axes as the network has (a point's
``dims``, 1 when absent; all the kind's points where none were measured so: onnxruntime runs a
depthwise convolution on an 8x8 image several times faster than on a sequence of equal MACs), and
for a resampling along the same axis (a point's ``axis``: an image's first axis, transposed to
the end and back, costs up to 8x its last axis's at equal MACs in the bundled table's points);
beyond the last point proportional to MACs (a line of slope 1 in log-log), below the first one
flat at its time (an operator smaller than any measured still costs a call of its kind:
onnxruntime's per-node work, not its MACs, dominates there), and 0 ms at 0 MACs (an operator that
does not run). Before interpolating, points with equal MACs are averaged and the curve is made
non-decreasing (pool adjacent violators, in log ms): shapes of equal MACs run at different speeds
and timings are noisy, and a price that falls as MACs grow would reward the search for growing a
layer. A batch the table did not measure is priced from the nearest measured batch (nearest in
ratio, ties to the larger), scaled linearly:
ms(B) = ms(B0) * B / B0.

A convolution's or a linear layer's time per MAC depends on its shape, not only on its MACs: a
short kernel on a long sequence is memory-bound (9 taps run at about 3x a global kernel's
milliseconds per MAC at batch 32 in the bundled table), 8 channels at up to 2x 16's, an FFT form
on an 8x8 image at about 4x the per-MAC time of one on 16x16, and a linear layer of 8 channels
on 1024 positions far slower than one of 32 on 64 with the same MACs. One curve through all of a
kind's points, made non-decreasing, mixes them: it priced the base CCNN's global convolution on
150 samples at twice its measured time at batch 32. So these points record their shape,
``width`` (the channels of a depthwise convolution, C_in * C_out of a linear layer),
``positions`` (the product of the spatial size) and ``taps`` (the product of the kernel's; 1 for
a linear layer), and an operator that states its own is priced at its MACs times a time per MAC:
that of the measured shapes nearest it at its width (each shape's curve over its widths, read at
the MACs that width does there), interpolated bilinearly in log positions between the two
nearest measured lengths and, at each, in log taps per position between the two nearest
kernels (clamped at the ends). Taps per position tell a short kernel (9 / positions), a global
one (about 1) and a resolution mask's folded periodic one (2 - 1 / positions, run circularly at
the training's FFT length, whose odd factors run at about twice the time per MAC of a global
kernel's four-step FFT) apart at any length.
Points without a shape (files measured before it was recorded, and the other kinds) and
operators that state none are priced by MACs alone.

onnxruntime runs a direct (grouped) convolution in its NCHWc layout, on blocks of channels: 8 or
16 on x86 (AVX2, AVX-512). A convolution of 33 or 40 channels then runs as 48 on a 16-channel
machine, at 1.5x the time of 32 at batch 32 (benchmarks/latency_prediction.py, last table),
and the grid's widths, multiples of 8, never show it. The table records
the block it measured (``header["channel_block"]``, :func:`export.latency_table.channel_block`;
1 when absent), and a ``conv.direct`` operator that states its shape is priced at its width
rounded up to it: MACs and width of the padded channels.

Which table (:func:`load_table`): the one asked for, else the cache file measured on this machine
with these threads, else the bundled default. A table that was measured on another machine (CPU
model and count), with other versions (onnxruntime, torch, onnx, python major.minor,
dnarch-deploy) or other threads, or that cannot be read, gets a warning naming the file and what
differs, and the bundled table is used instead. Falling back to the bundled table warns once per
call, unless the bundled table itself was measured here: its milliseconds are another machine's,
which a budget relative to the base network mostly cancels out, but an absolute figure does not.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from . import __version__
from .curves import curve, interpolate, log_ms_per_mac, shape_grid
from .io import atomic_write_text
from .operators import CONV_TACTICS, RESAMPLE_FORMS
from .tasks.cache import cache_root

# 2: points record their rank and a resampling's axis, measured on opset-20 lowerings (one Gelu
# node, 1x1 layers as Conv); a table of schema 1 was timed on other graphs and is not used.
# 3: the kind "copy" (the Slices and Concat around a block narrower than the stream).
# 4: the kind "add" (the bias and residual Adds, about a third of GELU's time per element).
SCHEMA = "dnarch-deploy/latency-table/4"
# the operator kinds of dnarch_deploy.operators: a pointwise linear map (measured: a 1x1 Conv
# plus bias), an elementwise op (measured: GELU), an Add (measured: a per-position bias map), a
# copy of channels (measured: two Slices and a Concat), each convolution tactic, each
# resampling form
KINDS = ("linear", "pointwise", "add", "copy", *(f"conv.{t}" for t in CONV_TACTICS),
         *(f"resample.{f}" for f in RESAMPLE_FORMS))
BUNDLED = Path(__file__).parent / "data" / "latency_default.json"
VERSIONED = ("onnxruntime", "torch", "onnx")  # the packages whose versions a table records
# The batches a deployment is judged at when the user names none: a small and a large one. The
# table measures both, export tunes its tactics for both and measures both, and a --cost latency
# budget prices both (dnarch_deploy.cost.latency_units).
DEFAULT_BATCHES = (1, 32)


class LatencyTableWarning(UserWarning):
    """A latency table could not be used as asked (see :func:`load_table`)."""


SHAPE = ("width", "positions", "taps")  # a point's shape fields, 0 where not recorded


class Point(NamedTuple):
    macs: float  # multiply-accumulates per sample
    ms: float  # median milliseconds for the whole batch
    shape: str = ""  # what was measured, for the reader
    dims: int = 1  # spatial axes of the measured input: 1 (a sequence), 2 (an image) or 3
    axis: int | None = None  # a resampling's spatial axis (on an image, 0 is the slow one)
    # a convolution's or linear layer's shape (0: not recorded): its width (channels; C_in *
    # C_out of a linear layer), the product of its spatial size and of its kernel's taps
    width: int = 0
    positions: int = 0
    taps: int = 0


# --- this machine ---------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict:
    """What identifies this machine for a table: its CPU model and logical CPU count."""
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count() or 0}


def versions() -> dict:
    """The versions a table's timings depend on (None: not installed)."""
    found = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    found["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    found["dnarch-deploy"] = __version__
    return found


def make_header(threads: int, batches: list[int], command: str) -> dict:
    """The header of a table measured now, on this machine."""
    return {**machine(), "threads": threads, "batches": sorted(batches), "versions": versions(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command}


def cache_path(threads: int = 1) -> Path:
    """This machine's table for ``threads``: $DNARCH_CACHE/latency/ (default
    ~/.cache/dnarch-deploy/latency/), named by threads and a hash of :func:`machine`."""
    key = hashlib.sha256(json.dumps(machine(), sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / "latency" / f"threads{threads}-{key}.json"


# --- the table ------------------------------------------------------------------------------------


@dataclass
class LatencyTable:
    """Measured operator latencies: ``points[batch][kind]``, a list of :class:`Point`."""

    header: dict
    points: dict[int, dict[str, list[Point]]]
    source: str = "<memory>"  # the file it was read from, for messages
    _curves: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # (batch, kind, dims) -> shape_grid, for the kinds whose points there all record a shape
    _shapes: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # (batch, kind, dims, width, positions, taps) -> log ms per MAC: the search prices the same
    # few shapes at every step
    _rates: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for batch, kinds in self.points.items():
            for kind, pts in kinds.items():
                self._curves[batch, kind, None, None] = curve(pts)
                for dims in {p.dims for p in pts}:
                    same = [p for p in pts if p.dims == dims]
                    self._curves[batch, kind, dims, None] = curve(same)
                    for axis in {p.axis for p in same} - {None}:
                        self._curves[batch, kind, dims, axis] = curve(
                            [p for p in same if p.axis == axis])
                    if all(p.width and p.positions and p.taps for p in same):
                        self._shapes[batch, kind, dims] = shape_grid(same)

    @property
    def batches(self) -> list[int]:
        return sorted(self.points)

    def nearest_batch(self, batch: int) -> int:
        """The measured batch that prices ``batch``: the nearest in log scale (the larger on a
        tie)."""
        if int(batch) != batch or batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        return min(self.batches, key=lambda b: (abs(math.log(batch / b)), -b))

    def overhead(self, batch: int) -> float:
        """Milliseconds a network's call costs besides its operators at ``batch`` (the nearest
        measured batch's; 0 for a table that did not measure it)."""
        return float(self.header.get("overhead_ms", {}).get(str(self.nearest_batch(batch)), 0.0))

    def predict_ms(self, kind: str, macs: Tensor | float, batch: int, dims: int = 1,
                   axis: int | None = None, shape: tuple = (0, 0, 0)) -> Tensor | float:
        """Milliseconds of one operator of ``kind`` doing ``macs`` multiply-accumulates per sample
        at ``batch`` in a network on ``dims`` spatial axes (a resampling: along ``axis``; a
        convolution or linear layer: of ``shape``, (width, positions, taps), where known; module
        docstring).
        A tensor ``macs`` (any shape, elementwise; the ``shape`` entries numbers or tensors
        broadcastable to it) gives a tensor differentiable in ``macs``; a number gives a
        float."""
        if kind not in KINDS:
            raise ValueError(f"unknown operator kind {kind!r}; known kinds: {', '.join(KINDS)}")
        near = self.nearest_batch(batch)
        m = macs if isinstance(macs, Tensor) else torch.tensor(float(macs), dtype=torch.float64)
        if not m.is_floating_point():
            m = m.double()
        if kind == "conv.direct" and self.channel_block > 1:
            m, shape = self._on_channel_blocks(m, shape)
        positive = m > 0
        # where() takes no gradient from the masked branch; log of 1 keeps it finite
        log_m = torch.log(torch.where(positive, m, 1.0))
        log_ms = interpolate(log_m, self.curve(near, kind, dims, axis))
        grid = self._shapes.get((near, kind, dims))
        if grid is not None:
            shapes = torch.stack(torch.broadcast_tensors(
                *(torch.as_tensor(v, dtype=torch.float64, device=m.device) for v in shape), m), -1)
            for c, p, t in {tuple(q) for q in shapes[..., :3].reshape(-1, 3).tolist()
                            if min(q) > 0}:
                key = (near, kind, dims, c, p, t)
                if key not in self._rates:
                    self._rates[key] = log_ms_per_mac(grid, c, p, t)
                here = (shapes[..., :3] == shapes.new_tensor([c, p, t])).all(-1)
                log_ms = torch.where(here, log_m + self._rates[key], log_ms)
        ms = torch.where(positive, torch.exp(log_ms) * (batch / near), 0.0)
        return ms if isinstance(macs, Tensor) else float(ms)

    @property
    def channel_block(self) -> int:
        """The channels onnxruntime's direct convolution runs in blocks of (module docstring)."""
        return int(self.header.get("channel_block", 1))

    def _on_channel_blocks(self, m: Tensor, shape: tuple) -> tuple[Tensor, tuple]:
        """A direct convolution's MACs and shape at its width rounded up to the channel block:
        the padded MACs in value, ``m``'s gradient scaled alike."""
        width, positions, taps = (torch.as_tensor(v, dtype=torch.float64, device=m.device)
                                  for v in shape)
        known = (width > 0) & (positions > 0) & (taps > 0) & (m > 0)
        padded = torch.ceil(width / self.channel_block) * self.channel_block
        scale = torch.where(known, padded * positions * taps / torch.where(known, m, 1.0), 1.0)
        return m * scale.detach(), (torch.where(known, padded, width), positions, taps)

    def curve(self, batch: int, kind: str, dims: int, axis: int | None
               ) -> tuple[Tensor, Tensor, Tensor]:
        """The points measured on ``dims`` axes (along ``axis``), else on ``dims`` axes, else all
        of the kind's."""
        for key in ((batch, kind, dims, axis), (batch, kind, dims, None)):
            if key in self._curves:
                return self._curves[key]
        return self._curves[batch, kind, None, None]

    def differences(self, threads: int) -> list[str]:
        """What differs between this table's header and this machine with ``threads``."""
        h, here = self.header, {**machine(), "threads": threads}
        diffs = [f"{k} {h.get(k)!r} (here {v!r})" for k, v in here.items() if h.get(k) != v]
        ours, theirs = versions(), h.get("versions", {})
        diffs += [f"{k} {theirs.get(k)} (here {v})" for k, v in ours.items()
                  if theirs.get(k) != v]
        return diffs

    # --- JSON ---

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "header": self.header, "points": {
            str(b): {k: [_point_json(p) for p in pts] for k, pts in kinds.items()}
            for b, kinds in sorted(self.points.items())}}

    @classmethod
    def from_json(cls, data: object, source: str = "<memory>") -> LatencyTable:
        """A table from its JSON form; a ValueError says what is wrong with it."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a latency table (schema is not {SCHEMA!r})")
        header, raw = data.get("header"), data.get("points")
        if not isinstance(header, dict) or not isinstance(raw, dict) or not raw:
            raise ValueError("a latency table needs a 'header' object and 'points' by batch")
        for key, kind in (("cpu", str), ("cpu_count", int), ("threads", int), ("batches", list),
                          ("versions", dict)):
            if not isinstance(header.get(key), kind):
                raise ValueError(f"header field {key!r} is missing or not a {kind.__name__}")
        points: dict[int, dict[str, list[Point]]] = {}
        for b, kinds in raw.items():
            if not (isinstance(b, str) and b.isdigit() and int(b) >= 1):
                raise ValueError(f"batch {b!r} is not a positive integer")
            if not isinstance(kinds, dict) or set(kinds) != set(KINDS):
                have = sorted(kinds) if isinstance(kinds, dict) else kinds
                raise ValueError(f"batch {b}: kinds {have} are not {list(KINDS)}")
            points[int(b)] = {k: [_point(p, f"batch {b}, {k}") for p in kinds[k]] for k in KINDS}
            if not all(points[int(b)].values()):
                raise ValueError(f"batch {b}: a kind has no points")
        if sorted(points) != sorted(header["batches"]):
            raise ValueError(f"points for batches {sorted(points)}, header says "
                             f"{header['batches']}")
        block = header.get("channel_block", 1)
        if not (isinstance(block, int) and block >= 1):
            raise ValueError(f"header field 'channel_block' {block!r} is not a positive integer")
        overhead = header.get("overhead_ms", {})
        if not (isinstance(overhead, dict) and set(overhead) <= set(raw) and all(
                isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                for v in overhead.values())):
            raise ValueError(f"header field 'overhead_ms' {overhead!r} is not a non-negative "
                             "number of ms per measured batch")
        return cls(header=header, points=points, source=source)

    @classmethod
    def load(cls, path: str | Path) -> LatencyTable:
        """Read a table; OSError when unreadable, ValueError when not a valid table."""
        text = Path(path).read_text()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not JSON ({e})") from None
        return cls.from_json(data, source=str(path))

    def save(self, path: str | Path) -> None:
        """Write atomically (a temporary file, then a rename)."""
        atomic_write_text(path, json.dumps(self.to_json(), indent=1) + "\n")


def _point_json(p: Point) -> dict:
    """A point's JSON object; a shape not recorded (zeros: not a convolution or linear layer) is
    left out."""
    return {k: v for k, v in p._asdict().items() if v or k not in SHAPE}


def _point(p: object, where: str) -> Point:
    ok = isinstance(p, dict) and all(
        isinstance(p.get(k), int | float) and math.isfinite(p[k]) and p[k] > 0
        for k in ("macs", "ms"))
    if not ok:
        raise ValueError(f"{where}: point {p!r} needs positive finite 'macs' and 'ms'")
    dims, axis = p.get("dims", 1), p.get("axis")
    if type(dims) is not int or dims not in (1, 2, 3):
        raise ValueError(f"{where}: point {p!r} has 'dims' {dims!r}, not 1, 2 or 3")
    if axis is not None and (type(axis) is not int or axis not in range(dims)):
        raise ValueError(f"{where}: point {p!r} has 'axis' {axis!r}, not one of its {dims} axes")
    shape = {k: p.get(k, 0) for k in SHAPE}
    if not all(type(v) is int and v >= 0 for v in shape.values()):
        raise ValueError(f"{where}: point {p!r} has 'width', 'positions' or 'taps' that is not "
                         "a non-negative integer")
    return Point(float(p["macs"]), float(p["ms"]), str(p.get("shape", "")), dims, axis,
                 **shape)


# --- which table ----------------------------------------------------------------------------------


def load_table(path: str | Path | None = None, threads: int = 1,
               batches: Sequence[int] = ()) -> LatencyTable:
    """The latency table to price operators with: ``path``, else this machine's cached table for
    ``threads`` (:func:`cache_path`), else the bundled default. A table that is unreadable or
    was measured elsewhere (another machine, versions or threads) is replaced by the bundled
    one, with a :class:`LatencyTableWarning` naming it and what differs (module docstring).
    ``batches``: the batches the caller will predict at; a warning for each the table did not
    measure (it is then scaled from the nearest measured batch)."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    cached = cache_path(threads)
    remeasure = f"`python -m export.latency_table --threads {threads}` measures one"
    if path is None and not cached.exists():
        # the usual first run: quiet if the bundled table was measured here
        problem, quiet = (f"no latency table measured on this machine with {threads} threads "
                          f"({cached}); {remeasure}"), True
    else:
        path = Path(cached if path is None else path)
        try:
            table = LatencyTable.load(path)
        except (OSError, ValueError) as e:
            # e.g. a table of an older version, without an operator kind added since
            problem, quiet = f"latency table {path} cannot be used: {e} ({remeasure})", False
        else:
            diffs = table.differences(threads)
            if not diffs:
                return _check_batches(table, batches)
            problem = f"latency table {path} was measured elsewhere: {'; '.join(diffs)}"
            quiet = False
    table = LatencyTable.load(BUNDLED)  # a broken bundled table is a packaging bug: raise
    diffs = table.differences(threads)
    if diffs or not quiet:
        where = f", measured on {table.header['cpu']} ({'; '.join(diffs)})" if diffs else ""
        warnings.warn(f"{problem}; using the bundled table {BUNDLED}{where}", LatencyTableWarning,
                      stacklevel=2)
    return _check_batches(table, batches)


def _check_batches(table: LatencyTable, batches: Sequence[int]) -> LatencyTable:
    for batch in batches:
        if batch not in table.points:
            warnings.warn(f"latency table {table.source} measured batches {table.batches}, not "
                          f"{batch}: its milliseconds are scaled from the nearest",
                          LatencyTableWarning, stacklevel=3)
    return table

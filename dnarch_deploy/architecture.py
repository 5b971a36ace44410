"""The found architecture as plain, versioned JSON (a file of the run directory, see rundir.py).

Written per epoch to ``architectures.jsonl`` and at the end to ``architecture.json``; read by export
and the dashboard. Reading validates every field and names the file and field that is wrong.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .migrate import REMOVED_ARCHITECTURE, drop_removed

SCHEMA = "dnarch-architecture"
VERSION = 1


class SchemaError(ValueError):
    """A file that does not follow the schema: the message names the file and the field."""


@dataclass
class BlockArchitecture:
    index: int  # block position in the maximum-depth network
    kernel_size: list[int]  # per axis, in input samples (odd)
    resolution: list[int]  # per axis, samples at which the block computes
    kernel_taps: list[int]  # per axis, taps actually used at that resolution (odd)
    n_in: int
    n_mid: int
    n_out: int
    depth_weight: float  # depth-mask value (1.0 when depth is not learned)
    # per axis, the deployed convolution's taps (None: kernel_taps): 2 R - 1 where export folds
    # the resolution mask of a full-resolution axis into the kernel (BlockPlan.conv_taps)
    conv_taps: list[int] | None = None
    # per axis, whether the resolution mask crops it: the block downsamples there, even where
    # the cropped length rounds up to the input's (None: where resolution < input_size)
    cropped: list[bool] | None = None
    # per axis, the training's FFT lengths where the resolution mask filters the convolution's
    # spectrum (BlockPlan.conv_fft): the MatMul FFT forms run it circularly there
    # (operators.conv_period); None: no mask, or a file from before it was recorded
    conv_fft: list[int] | None = None

    def cropped_axes(self, input_size) -> list[bool]:
        """``cropped``; for files from before it was recorded, where resolution < input (a crop
        whose length rounded up to the input's cannot be told from those)."""
        if self.cropped is not None:
            return list(self.cropped)
        return [r < s for r, s in zip(self.resolution, input_size)]

    def deployed_taps(self, input_size, learn: str) -> list[int]:
        """``conv_taps``; for files from before it was recorded, the plan's rule: a learned
        resolution folds its mask into the kernel on every axis it does not crop."""
        from .spectral import folded_taps

        if self.conv_taps is not None:
            return list(self.conv_taps)
        return list(folded_taps(self.resolution, self.kernel_taps,
                                self.cropped_axes(input_size), "R" in learn.upper()))


@dataclass
class Architecture:
    input_size: list[int]
    in_channels: int
    out_channels: int
    dense: bool
    learn: str
    stream_width: int
    depth: int  # blocks in use (depth-mask value >= threshold)
    blocks: list[BlockArchitecture] = field(default_factory=list)
    max_depth: int = 0
    max_width: int = 0
    epoch: int | None = None
    vocab_size: int = 0  # > 0: token inputs, the encoder a table look-up
    # the global decoder's reductions over positions, in the order its head reads them ([] for
    # a dense decoder; None in files from before it was recorded: see decoder_pooling)
    pooling: list[str] | None = None
    schema: str = SCHEMA
    version: int = VERSION

    def decoder_pooling(self) -> list[str]:
        """``pooling``; for files from before it was recorded, the mean alone (a global
        decoder) or nothing (a dense one)."""
        if self.pooling is not None:
            return list(self.pooling)
        return [] if self.dense else ["mean"]

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> None:
        from .io import atomic_write_text

        atomic_write_text(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, data: object, where: str = "architecture") -> Architecture:
        _expect(isinstance(data, dict), where, "", "a JSON object")
        if data.get("schema") != SCHEMA:
            raise SchemaError(
                f"{where}: field 'schema' must be {SCHEMA!r}, got {data.get('schema')!r}"
            )
        if data.get("version") != VERSION:
            raise SchemaError(
                f"{where}: field 'version' is {data.get('version')!r}; this dnarch-deploy "
                f"reads version {VERSION} (written by another version?)"
            )
        top = {
            "input_size": _int_list,
            "in_channels": _pos_int,
            "out_channels": _pos_int,
            "dense": _bool,
            "learn": _str,
            "stream_width": _pos_int,
            "depth": _nonneg_int,
            "max_depth": _nonneg_int,
            "max_width": _nonneg_int,
        }
        kwargs = {k: _field(data, k, check, where) for k, check in top.items()}
        epoch = data.get("epoch")
        _expect(epoch is None or _nonneg_int(epoch), where, "epoch", "null or an integer >= 0")
        vocab_size = data.get("vocab_size", 0)  # absent in files from before it was recorded
        _expect(_nonneg_int(vocab_size), where, "vocab_size", "an integer >= 0", vocab_size)
        pooling = data.get("pooling")  # absent in files from before it was recorded
        poolings = [[]] if kwargs["dense"] else [["mean"], ["mean", "max"]]
        _expect(pooling is None or pooling in poolings, where, "pooling",
                f"null or one of {poolings} (dense: {kwargs['dense']})", pooling)
        refusal = drop_removed({k: data[k] for k in REMOVED_ARCHITECTURE if k in data}, where)
        if refusal:  # a block form since removed (files before it was dropped record it)
            raise SchemaError(refusal)
        blocks = _field(data, "blocks", lambda v: isinstance(v, list), where)
        block_fields = {
            "index": _nonneg_int,
            "kernel_size": _int_list,
            "resolution": _int_list,
            "kernel_taps": _int_list,
            "n_in": _pos_int,
            "n_mid": _pos_int,
            "n_out": _pos_int,
            "depth_weight": _number,
        }
        optional = {"conv_taps": _int_list, "cropped": _bool_list,  # None when absent
                    "conv_fft": _int_list}
        parsed = []
        for i, block in enumerate(blocks):
            _expect(isinstance(block, dict), where, f"blocks[{i}]", "a JSON object")
            fields = {k: _field(block, k, check, where, f"blocks[{i}].")
                      for k, check in block_fields.items()}
            for k, check in optional.items():
                if block.get(k) is not None:
                    fields[k] = _field(block, k, check, where, f"blocks[{i}].")
            axes = len(kwargs["input_size"])
            for k in ("kernel_size", "resolution", "kernel_taps", *optional):
                if fields.get(k) is not None:  # one entry per axis of the input
                    _expect(len(fields[k]) == axes, where, f"blocks[{i}].{k}",
                            f"one entry per input axis ({axes})", fields[k])
            parsed.append(BlockArchitecture(**fields))
        _expect(
            len(parsed) == kwargs["depth"], where, "depth", f"the number of blocks ({len(parsed)})"
        )
        return cls(**kwargs, blocks=parsed, epoch=epoch, vocab_size=vocab_size, pooling=pooling)

    @classmethod
    def load(cls, path: str | Path) -> Architecture:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise SchemaError(f"{path}: file not found") from None
        except json.JSONDecodeError as e:
            raise SchemaError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(data, where=str(path))


def _field(data: dict, key: str, check, where: str, prefix: str = ""):
    if key not in data:
        raise SchemaError(f"{where}: missing field '{prefix}{key}'")
    value = data[key]
    _expect(check(value), where, prefix + key, check.__doc__ or "a valid value", value)
    return value


def _expect(ok: bool, where: str, key: str, what: str, value: object = None) -> None:
    if not ok:
        got = f", got {value!r}" if value is not None else ""
        raise SchemaError(f"{where}: field '{key}' must be {what}{got}")


def _pos_int(v) -> bool:
    """an integer >= 1"""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _nonneg_int(v) -> bool:
    """an integer >= 0"""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _int_list(v) -> bool:
    """a list of 1 or 2 integers >= 1"""
    return isinstance(v, list) and len(v) in (1, 2) and all(_pos_int(x) for x in v)


def _bool_list(v) -> bool:
    """a list of 1 or 2 booleans"""
    return isinstance(v, list) and len(v) in (1, 2) and all(isinstance(x, bool) for x in v)


def _bool(v) -> bool:
    """true or false"""
    return isinstance(v, bool)


def _str(v) -> bool:
    """a string"""
    return isinstance(v, str)


def _number(v) -> bool:
    """a number in [0, 1]"""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0


def describe(model, epoch: int | None = None) -> Architecture:
    """The architecture a DNArch model's masks describe right now."""
    import torch

    c = model.config
    with torch.no_grad():
        plan = model.plan()
    blocks = [
        BlockArchitecture(
            index=p.index,
            kernel_size=list(p.kernel_size),
            resolution=list(p.resolution),
            kernel_taps=[2 * h + 1 for h in p.half_taps],
            n_in=p.n_in,
            n_mid=p.n_mid,
            n_out=p.n_out,
            depth_weight=1.0 if p.depth_weight is None else round(float(p.depth_weight), 6),
            conv_taps=list(p.conv_taps),
            cropped=list(p.cropped),
            conv_fft=None if p.conv_fft is None else list(p.conv_fft),
        )
        for p in plan.blocks
    ]
    return Architecture(
        input_size=list(c.input_size),
        in_channels=c.in_channels,
        out_channels=c.out_channels,
        dense=c.dense,
        learn=c.learn,
        stream_width=plan.stream,
        depth=len(blocks),
        blocks=blocks,
        max_depth=c.max_depth,
        max_width=c.max_width,
        epoch=epoch,
        vocab_size=c.vocab_size,
        pooling=list(c.pooling),
    )


def compare_with_base(arch: Architecture, depth: int, width: int) -> dict:
    """How far the search went: the found architecture against the base CCNN_{D,H} (``depth``
    D, ``width`` H; full resolution, global kernels), for summary.json, the quality tables and
    the dashboard.

    ``distance`` is one scalar: the mean, over four components, of |log2(found / base)| —
    depth (blocks), width (per block, the mean of n_in, n_mid and n_out, against H), resolution
    (per block, the share of the input's positions it computes at, against 1) and kernel (per
    block, the share of the largest kernel's extent it spans, against 1); per-block terms are
    averaged over the blocks. 0 is the base network itself; 1 means a factor of 2 per
    component on average (e.g. half the resolution everywhere and nothing else changed: 0.25).
    """
    size = arch.input_size
    largest = [s if s % 2 else s - 1 for s in size]  # the global kernel per axis
    blocks = arch.blocks
    widths = [(b.n_in + b.n_mid + b.n_out) / 3 for b in blocks]
    resolution = [math.prod(b.resolution) / math.prod(size) for b in blocks]
    kernel = [math.prod(b.kernel_size) / math.prod(largest) for b in blocks]

    def mean_log(values: list[float], base: float) -> float:
        return sum(abs(math.log2(v / base)) for v in values) / len(values) if values else 0.0

    distance = (abs(math.log2(max(arch.depth, 1) / depth)) + mean_log(widths, width)
                + mean_log(resolution, 1.0) + mean_log(kernel, 1.0)) / 4
    all_widths = [w for b in blocks for w in (b.n_in, b.n_mid, b.n_out)]
    return {
        "depth": arch.depth, "base_depth": depth, "base_width": width,
        "width_mean": round(sum(all_widths) / len(all_widths), 2) if all_widths else 0.0,
        "width_range": [min(all_widths), max(all_widths)] if all_widths else [0, 0],
        "resolution": [[r / s for r, s in zip(b.resolution, size)] for b in blocks],
        "kernel_size": [list(b.kernel_size) for b in blocks],
        "distance": round(distance, 4),
    }


# the sizes set_masks replays and checks, per block (depth_weight is a mask value, not a size)
_BLOCK_SIZES = ("index", "kernel_size", "resolution", "kernel_taps", "n_in", "n_mid", "n_out")


def set_masks(model, arch: Architecture) -> None:
    """Set a DNArch model's mask parameters so that it describes ``arch``: the inverse of
    :func:`describe` for the sizes (depth, widths, resolution and kernel per block). Each mask's
    boundary is put in the middle of the interval that gives the wanted size (within appendix
    E's ranges), so the sizes survive rounding; the mask values inside the supports (and so the
    depth weights) are whatever the masks give there.

    Raises ValueError naming the block and field when the model's configuration cannot realise
    the architecture (another input, a size outside the masks' ranges, a mask it does not learn).
    """
    import torch

    c = model.config
    for key in ("input_size", "in_channels", "out_channels", "dense"):
        want, have = getattr(arch, key), getattr(c, key)
        if (list(want) if key == "input_size" else want) != (
                list(have) if key == "input_size" else have):
            raise ValueError(f"architecture field '{key}' is {want!r}; the model has {have!r}")
    if arch.decoder_pooling() != list(c.pooling):
        raise ValueError(f"architecture field 'pooling' is {arch.decoder_pooling()!r}; the model "
                         f"has {list(c.pooling)!r}")
    blocks = arch.blocks
    if [b.index for b in blocks] != list(range(len(blocks))):
        raise ValueError(f"architecture blocks have indices {[b.index for b in blocks]}; a DNArch "
                         "runs a prefix of its blocks (0, 1, ...)")
    offsets = _MaskOffsets(c)
    with torch.no_grad():
        if c.learns("D"):
            depth = len(blocks)
            model.mask_depth.fill_(offsets.sigmoid(depth, depth, c.max_depth, c.tau_depth,
                                                   "depth", depth))
        for i, b in enumerate(blocks):
            offsets.set_block(model, b, f"blocks[{i}]")
    model.clamp_masks_()
    _check_described(model, arch)


class _MaskOffsets:
    """The mask parameters that give wanted sizes, for :func:`set_masks`."""

    def __init__(self, config):
        self.c = config
        self.offset = math.log(1.0 / (1.0 - config.threshold) - 1.0)  # mu = x_T + offset / tau

    def middle(self, lo: float, hi: float, where: str, want) -> float:
        c = self.c
        if not lo < hi:
            raise ValueError(f"architecture {where} = {want!r} is outside what the model's masks "
                             f"can hold (configuration: learn={c.learn!r}, "
                             f"max_width={c.max_width}, max_depth={c.max_depth}, "
                             f"input_size={list(c.input_size)})")
        return 0.5 * (lo + hi)

    def sigmoid(self, first: int, last: int, n: int, tau: float, where: str, want) -> float:
        """An offset whose support holds the first k of the n grid positions, for some k in
        first ... last (several counts may give the same size)."""
        from . import masks as M

        mu_lo, mu_hi = M.sigmoid_mu_range(tau)
        if not 1 <= first <= last <= n:
            self.middle(0.0, 0.0, where, want)
        if n == 1 or first == n:
            return mu_hi  # the top of the range keeps every position
        lo = max(-1.0 + 2.0 * (first - 1) / (n - 1), mu_lo - self.offset / tau)
        hi = mu_hi - self.offset / tau
        if last < n:
            hi = min(hi, -1.0 + 2.0 * last / (n - 1))
        return self.middle(lo, hi, where, want) + self.offset / tau

    def kernel_sigma(self, b: BlockArchitecture, a: int, where: str) -> float:
        """The Gaussian mask's sigma that gives block ``b``'s kernel on axis ``a``: x_T = sigma
        sqrt(-2 ln T) is the kernel's half-width at full resolution (steps of 2 / (k_max - 1))
        and, scaled by r / n, at the block's resolution."""
        c = self.c
        k_max, r, n = c.max_kernel[a], b.resolution[a], c.input_size[a]
        step, scale, h_max = 2.0 / (k_max - 1), r / n, (k_max - 1) // 2
        h, h_r = (b.kernel_size[a] - 1) // 2, (b.kernel_taps[a] - 1) // 2
        s_lo, s_hi = c.kernel_sigma_range(a)
        root = math.sqrt(-2.0 * math.log(c.threshold))
        lo = max(h * step, h_r * step / scale, s_lo * root)
        hi = s_hi * root
        if h < h_max:
            hi = min(hi, (h + 1) * step)
        if h_r < min(h_max, (r - 1) // 2):
            hi = min(hi, (h_r + 1) * step / scale)
        return self.middle(lo, hi, f"{where}.kernel_size/kernel_taps",
                           (b.kernel_size[a], b.kernel_taps[a])) / root

    def set_block(self, model, b: BlockArchitecture, where: str) -> None:
        from .spectral import resolution_for_bins

        c = self.c
        if c.learns("W"):
            for j, key in enumerate(("n_in", "n_mid", "n_out")):
                width = getattr(b, key)
                model.mask_width[b.index, j] = self.sigmoid(width, width, c.max_width,
                                                            c.tau_width, f"{where}.{key}", width)
        cropped = b.cropped_axes(c.input_size)
        for a, (n, r) in enumerate(zip(c.input_size, b.resolution)):
            if c.learns("R"):  # the bin counts that give r (on long axes, several), cropped
                # or not (a cropped length may round up to n)
                bins = [k for k in range(1, n // 2 + 2)
                        if resolution_for_bins(k, n) == r and (k <= n // 2) == cropped[a]]
                model.mask_res[b.index, a] = self.sigmoid(
                    min(bins, default=0), max(bins, default=0), n // 2 + 1,
                    c.tau_resolution, f"{where}.resolution", r)
            if c.learns("K") and c.max_kernel[a] > 1:
                model.mask_sigma[b.index, a] = self.kernel_sigma(b, a, where)


def _check_described(model, arch: Architecture) -> None:
    """The model's masks describe ``arch``, or a ValueError names the first field that differs."""
    c = model.config
    got = describe(model)
    if got.depth != arch.depth or len(got.blocks) != len(arch.blocks):
        raise ValueError(f"architecture depth {arch.depth} ({len(arch.blocks)} blocks): the "
                         f"model's configuration (learn={c.learn!r}) gives {got.depth}")
    for i, (g, b) in enumerate(zip(got.blocks, arch.blocks)):
        for key in _BLOCK_SIZES:
            if getattr(g, key) != getattr(b, key):
                raise ValueError(f"architecture blocks[{i}].{key} is {getattr(b, key)!r}; the "
                                 f"model's configuration (learn={c.learn!r}) gives "
                                 f"{getattr(g, key)!r}")
    if got.stream_width != arch.stream_width:
        raise ValueError(f"architecture field 'stream_width' is {arch.stream_width}; its blocks "
                         f"give {got.stream_width}")

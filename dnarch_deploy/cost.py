"""The cost model: the multiply-accumulates per sample of the network export deploys.

A budget is a promise about the deployed network (design.md, "Cost model and budget"), so the
cost prices every operator export lowers a network to, as export lowers it by cost
(:func:`dnarch_deploy.block_ops.block_operators`): per block the spectral down- and up-sampling
of each resampled axis in its cheapest form, the depthwise convolution at the tactic export picks
for its size and its deployed taps (2 R - 1 where the resolution mask is folded into the kernel),
the two pointwise linear maps and the first one's bias, the GELU, the residual add and the
Slices and Concat that read and write a block narrower than the stream; the encoder's linear map
and GELU (its norm folded into the linear map) and the decoder. So a found network's figure is
export's theoretical total for it (``--no-tune``; a tuned export may pick other tactics by
measurement).

Left out: the kernel network and the masks (gone after export), the input normalisation and the
pooling's divisions, and the nodes that reshape or pad without arithmetic (the direct tactic's
Unsqueeze and Squeeze, its channel Pad where the stream has fewer channels than it runs at, the
factored resampling's Transposes): a latency table measures them inside their operator's points.

Sizes may be ints (a frozen architecture: :func:`architecture_cost`, per layer
:func:`layer_costs`) or, in the search's loss (:func:`model_cost`), straight-through tensors: each
operator's value is the lowered network's, its gradient that of a smooth formula of the same
shape in the masks' continuous sizes, declared with the operator (:class:`dnarch_deploy.block_ops
.BlockOp`'s ``proxy``), scaled to the value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from . import masks as M
from .block_ops import Operator, block_operators, operator_axis, proxy
from .latency import LatencyTable
from .model import DNArch
from .plan import Plan
from .spectral import folded_taps

Size = Tensor | float


@dataclass(frozen=True)
class Units:
    """What a cost is counted in: multiply-accumulates per sample (no ``table``, the default), or
    onnxruntime milliseconds at ``batch`` predicted operator by operator from a per-operator
    latency table (:class:`dnarch_deploy.latency.LatencyTable`; ``--cost latency``), of which
    the base network's is ``base_ms`` when given: its measured time, which :func:`base_cost`
    then returns instead of a prediction (:mod:`export.base_latency` says why)."""

    table: LatencyTable | None = None
    batch: int = 1
    base_ms: float | None = None

    @property
    def name(self) -> str:
        return "macs" if self.table is None else "ms"

    @property
    def counts_macs(self) -> bool:
        """Whether :meth:`of` is the MACs themselves, whatever the operator."""
        return self.table is None

    def of(self, kind: str, macs: Size, dims: int = 1, axis: int | None = None,
           shape: tuple = (0, 0, 0)) -> Size:
        """One operator of ``kind`` doing ``macs`` (per sample; a tensor: each element) in a
        network on ``dims`` spatial axes (a resampling: along ``axis``; a convolution or linear
        layer: of ``shape``, its (width, positions, taps),
        :class:`~dnarch_deploy.block_ops.Operator`)."""
        if self.table is None:
            return macs
        return self.table.predict_ms(kind, macs, self.batch, dims, axis, shape)

    @property
    def per_call(self) -> float:
        """What one run of a whole network costs besides its operators (0 MACs; in ms, the
        table's fixed cost of a call)."""
        return 0.0 if self.table is None else self.table.overhead(self.batch)


MACS = Units()


@dataclass(frozen=True)
class BatchBlend:
    """Predicted milliseconds at several batch sizes as one cost (``--cost latency`` at batches 1
    and 32, the default): the weighted sum of each batch's milliseconds, weighted by the base
    network's, so that a network's cost over the base's is the mean of its per-batch ratios. A
    small network's time is mostly fixed costs at batch 1 and mostly arithmetic at 32 (found
    GunPoint networks ran at 0.2 of the base at batch 1 and 0.09 at 32), and a budget priced at
    one batch holds only there. It reads as milliseconds at the first batch (the base's cost is
    its time there). Built by :func:`latency_units`."""

    parts: tuple[tuple[Units, float], ...]  # (one batch's units, its weight)
    name = "ms"
    counts_macs = False  # a blend is priced per operator, even of MAC units (tests)

    def of(self, *args, **kwargs) -> Size:
        """:meth:`Units.of`, blended."""
        return sum(w * u.of(*args, **kwargs) for u, w in self.parts)

    @property
    def per_call(self) -> float:
        return sum(w * u.per_call for u, w in self.parts)


def latency_units(table: LatencyTable, batches: Sequence[int], config,
                  base_ms: Sequence[float] = ()) -> Units | BatchBlend:
    """Predicted milliseconds at ``batches``: at one, :class:`Units`; at several, their
    :class:`BatchBlend`, weighted by the base network of ``config`` (:func:`base_cost`).
    ``base_ms``: the base's measured milliseconds at each batch (none: predicted)."""
    measured = dict(zip(batches, base_ms, strict=True)) if base_ms else {}
    singles = [Units(table, b, measured.get(b)) for b in dict.fromkeys(batches)]
    if len(singles) == 1:
        return singles[0]
    base = [base_cost(config, u) for u in singles]
    return BatchBlend(tuple((u, base[0] / (len(singles) * c)) for u, c in zip(singles, base)))


# the kinds of the encoder's and decoder's terms (dnarch_deploy.operators names the blocks'); a
# global pooling reads each element once, as an Add does, not as a GELU computes
EDGE_KINDS = {"linear": "linear", "gelu": "pointwise", "pool": "add"}


def linear_cost(length: Size, n_in: Size, n_out: Size) -> Size:
    """Pointwise linear layer: L * N_in * N_out."""
    return length * n_in * n_out


def pointwise_cost(length: Size, channels: Size) -> Size:
    """Elementwise operation (activation, residual add, pooling): L * C."""
    return length * channels


def encoder_cost(length: Size, in_channels: int, stream: Size) -> dict:
    """The encoder as deployed: a linear map (none for tokens: ``in_channels`` 0, a table
    look-up) with the norm folded in, and a GELU."""
    return {"linear": linear_cost(length, in_channels, stream),
            "gelu": pointwise_cost(length, stream)}


def decoder_cost(length: Size, stream: Size, out_channels: int, pooling) -> dict:
    """The decoder as deployed: a dense one (``pooling`` empty) a linear map per position; a
    global one each reduction over the positions (``pooling``: ModelConfig.pooling) and a
    linear head on their outputs."""
    if not pooling:
        return {"linear": linear_cost(length, stream, out_channels)}
    heads = len(pooling)
    return {"pool": heads * pointwise_cost(length, stream),
            "linear": linear_cost(1, heads * stream, out_channels)}


def decoder_heads(pooling) -> int:
    """Weight matrices of the decoder: one per reduction (``pooling``), one if dense."""
    return max(1, len(pooling))


def _straight_through(soft: Tensor, hard: Tensor) -> Tensor:
    """``hard`` in value, ``soft``'s gradient (one autograd node)."""
    return soft + (hard - soft.detach())


# --- the search's cost: differentiable in the masks ----------------------------------------------


def _soft_sizes(model: DNArch) -> tuple[Tensor, Tensor]:
    """The masks' continuous sizes (eqs. 6-7), what the cost's gradient follows: per block, the
    columns n_in, n_mid, n_out, resolution per axis and kernel extent per axis (in input samples),
    (D, 3 + 2 axes); and the depth as block weights clamp(size(m_depth) - b, 0, 1), (D,) (§2.5
    "C_net,size(m_depth)"). A size that is not learned is its fixed value."""
    c = model.config
    ref = model.enc_w
    H, D, T = c.max_width, c.max_depth, c.threshold
    if c.learns("W"):
        widths = M.sigmoid_size(model.mask_width, c.tau_width, H, T)
    else:
        widths = torch.full((D, 3), float(H), dtype=ref.dtype, device=ref.device)
    size = torch.tensor(c.input_size, dtype=ref.dtype, device=ref.device)
    if c.learns("R"):
        resolution = M.sigmoid_size(model.mask_res, c.tau_resolution, 1, T) * size
    else:
        resolution = size.expand(D, -1)
    if c.learns("K"):
        kernel = torch.stack([M.gaussian_size(model.mask_sigma[:, a], k, T)
                              for a, k in enumerate(c.max_kernel)], dim=-1)
    else:
        kernel = torch.tensor(c.max_kernel, dtype=ref.dtype, device=ref.device).expand(D, -1)
    blocks = torch.arange(D, dtype=ref.dtype, device=ref.device)
    if c.learns("D"):
        weights = (M.sigmoid_size(model.mask_depth, c.tau_depth, D, T) - blocks).clamp(0, 1)
    else:
        weights = torch.ones_like(blocks)
    return torch.cat([widths, resolution, kernel], dim=-1), weights


def model_sizes(model: DNArch, plan: Plan | None = None) -> dict:
    """The straight-through sizes of the network the masks describe: each value is what the
    plan materialises (whole blocks, whole channels, the resolution and kernel taps actually
    used), each gradient the continuous size() of its mask (:func:`_soft_sizes`). Per block,
    (max_depth,) tensors: ``n_in``, ``n_mid``, ``n_out``, ``resolution`` and ``taps`` (lists,
    one per axis), ``weights`` (1 for a block that runs, else 0, in value); ``stream``;
    ``operators``: per block the lowered operators (:func:`dnarch_deploy.block_ops
    .block_operators`) of its materialised sizes, and ``conv_taps``: per block its deployed
    convolution's taps (for a block that does not run, both at its rounded continuous sizes:
    what it would cost if it ran, the depth's gradient)."""
    c = model.config
    axes = len(c.input_size)
    if plan is None:
        with torch.no_grad():
            plan = model.plan()
    soft, soft_weights = _soft_sizes(model)
    # the hard sizes built in Python and made a tensor once: a step's cost model is many tiny
    # operators, each costing more dispatch and autograd time than arithmetic (model_step.py)
    # a block that does not run keeps its soft sizes: its weight is 0
    rows, ran = soft.detach().tolist(), {p.index for p in plan.blocks}
    for p in plan.blocks:
        # taps at the block's resolution R span taps * S / R input samples
        rows[p.index] = [p.n_in, p.n_mid, p.n_out, *p.resolution,
                         *((2 * h + 1) * s / r
                           for h, s, r in zip(p.half_taps, c.input_size, p.resolution))]
    hard = torch.tensor(rows, dtype=soft.dtype, device=soft.device)
    hard_weights = torch.tensor([float(b in ran) for b in range(len(rows))], dtype=soft.dtype,
                                device=soft.device)
    sizes = _straight_through(soft, hard)
    columns = sizes.unbind(-1)
    res_axes, kernel = list(columns[3 : 3 + axes]), columns[3 + axes :]
    taps = [k * r / s for k, r, s in zip(kernel, res_axes, c.input_size)]
    lowered = {p.index: (p.conv_taps, p.cropped, p.conv_fft) for p in plan.blocks}
    # the stream is as wide as the widest channel a block in use reads or writes
    widest = sizes[sorted(ran), 0:3:2].max() if c.learns("W") and ran else None
    stream = c.max_width if widest is None else round(float(widest.detach()))
    conv_taps, operators, crop_limits = [], [], c.crop_limits()
    for b, row in enumerate(rows):
        n_in, n_mid, n_out = (max(1, round(v)) for v in row[:3])
        if b in lowered:
            res = tuple(int(r) for r in row[3 : 3 + axes])
            deployed, cropped, conv_fft = lowered[b]
        else:  # not run: its rounded continuous sizes, lowered as the plan would
            res = tuple(min(s, max(1, round(r))) for r, s in zip(row[3 : 3 + axes], c.input_size))
            res = tuple(r if r <= limit else s  # uncropped above the crop rule's limit
                        for r, s, limit in zip(res, c.input_size, crop_limits))
            cropped = tuple(r < s for r, s in zip(res, c.input_size))
            kernel = [2 * max(0, round((k * r / s - 1) / 2)) + 1  # odd, at resolution r
                      for k, r, s in zip(row[3 + axes :], res, c.input_size)]
            deployed = folded_taps(res, kernel, cropped, c.learns("R"))
            conv_fft = c.conv_fft(res, cropped)
        conv_taps.append(deployed)
        operators.append(block_operators(tuple(c.input_size), res, n_in, n_mid, n_out,
                                         deployed, cropped, stream=stream, conv_fft=conv_fft))
    return {
        "n_in": columns[0], "n_mid": columns[1], "n_out": columns[2], "resolution": res_axes,
        # a kernel spanning K input samples has K R / S taps at resolution R
        "taps": taps,
        "weights": _straight_through(soft_weights, hard_weights),
        "stream": float(c.max_width) if widest is None else widest,
        "conv_taps": conv_taps,
        "operators": operators,
    }


def model_cost(model: DNArch, plan: Plan | None = None,
               units: Units | BatchBlend = MACS) -> dict:
    """Differentiable cost of the network the masks describe: in value, the lowered MACs of
    exactly the network that runs and is exported (``total`` == :func:`architecture_cost` of
    :func:`~dnarch_deploy.describe`); in gradient, each operator's smooth formula
    (:func:`~dnarch_deploy.block_ops.proxy`) at the masks' straight-through sizes, scaled to its
    value. (With the continuous sizes as values, the floor-like discrete counts left found
    networks up to 14% under the budget; a fractional last block was paid for but not run.)

    ``plan``: the step's plan, if already drawn; ``units``: MACs, or predicted milliseconds
    (each operator priced by its kind, :class:`Units`). Returns ``{"total": Tensor, "encoder":
    dict, "blocks": dict, "block_weights": Tensor, "decoder": dict, "operators": list}`` in
    those units; the blocks' terms are (max_depth,) tensors, one per operator name (0 where a
    block has no such operator), weighted in the total by ``block_weights``; ``operators`` the
    lowered operators per block, in MACs (:func:`model_sizes`).
    """
    c = model.config
    z = model_sizes(model, plan)
    length, dims = float(math.prod(c.input_size)), len(c.input_size)
    names = list(dict.fromkeys(n for ops in z["operators"] for n in ops))
    device, dtype = z["weights"].device, z["weights"].dtype
    # (operators, blocks): each operator's lowered MACs per block (0 where a block has none)
    # and its proxy; all at once, as the step's cost is many tiny tensors (model_step.py)
    hard = torch.tensor([[ops[name].macs if name in ops else 0.0 for ops in z["operators"]]
                         for name in names], dtype=dtype, device=device)
    kinds = [[ops[name].kind if name in ops else "" for ops in z["operators"]] for name in names]
    proxies = torch.stack([proxy(name, k, z, c.input_size) for name, k in zip(names, kinds)])
    # the lowered MACs in value, the proxy's gradient; 0 where a block has no such operator, even
    # were its proxy not finite
    macs = torch.where(hard > 0, proxies * (hard / proxies.detach().clamp_min(1e-30)), 0.0)
    if units.counts_macs:  # every kind costs its MACs: no per-kind pass (a training step)
        terms = macs
    else:
        # a convolution's or linear layer's shape, discrete: the table's key, not differentiated
        shapes = torch.tensor([[[getattr(ops[name], f) if name in ops else 0
                                 for ops in z["operators"]] for f in ("width", "positions", "taps")]
                               for name in names], device=device)
        terms = torch.stack([
            sum(torch.where(torch.tensor([k == kind for k in row_kinds], device=device),
                            units.of(kind, row, dims, _axis(name), tuple(shape)), 0.0)
                for kind in sorted(set(row_kinds) - {""}))
            for name, row_kinds, row, shape in zip(names, kinds, macs, shapes)])
    blocks = dict(zip(names, terms.unbind(0)))
    enc = _edge(encoder_cost(length, 0 if c.vocab_size else c.in_channels, z["stream"]), units,
                dims)
    dec = _edge(decoder_cost(length, z["stream"], c.out_channels, c.pooling), units, dims)
    total = (sum(enc.values()) + sum(dec.values()) + (z["weights"] * terms.sum(0)).sum()
             + units.per_call)
    return {"total": total, "encoder": enc, "blocks": blocks, "block_weights": z["weights"],
            "decoder": dec, "operators": z["operators"]}


def _axis(name: str) -> int | None:
    """The axis a block operator resamples, else None (:func:`~dnarch_deploy.block_ops
    .operator_axis`)."""
    return operator_axis(name)


def _edge(terms: dict, units: Units | BatchBlend, dims: int) -> dict:
    """The encoder's or decoder's terms in ``units``."""
    return {name: units.of(EDGE_KINDS[name], macs, dims) for name, macs in terms.items()}


def base_cost(config, units: Units | BatchBlend = MACS) -> float:
    """The cost of the base network CCNN_{D,H} a config describes (full resolution, global
    kernels, no masks): the default C_target. In units with the base's measured milliseconds,
    those."""
    if isinstance(units, BatchBlend):
        return sum(w * base_cost(config, u) for u, w in units.parts)
    if units.base_ms is not None:
        return units.base_ms
    size, H = tuple(config.input_size), config.width
    ops = block_operators(size, size, H, H, H, tuple(config.max_kernel), (False,) * len(size),
                          stream=H)
    return sum(_layers(size, 0 if config.vocab_size else config.in_channels, config.out_channels,
                       config.pooling, H, [ops] * config.depth, units).values()) + units.per_call


def cost_range(config, units: Units | BatchBlend = MACS) -> tuple[float, float]:
    """(cheapest, dearest): the cost of the smallest and the largest network the search space of
    ``config`` (its ``learn``) can materialise. Every mask but the resolution's is at the end of
    its clamping range (appendix E), where the cost is extreme; the resolution's cost is not
    monotone (a crop adds resampling, whose form depends on the cropped length), so the dearest
    network is the dearest over every length each axis can take (cropped or not), all blocks
    alike. A budget outside this range cannot be met."""
    import itertools

    from .architecture import describe  # architecture imports this module's neighbours
    from .spectral import resolution_for_bins

    model = DNArch(config)
    costs = []
    with torch.no_grad():
        for end in (0, 1):
            for name, p in model.named_parameters():
                if name == "mask_sigma":
                    for axis in range(len(config.max_kernel)):
                        p[:, axis] = config.kernel_sigma_range(axis)[end]
                elif name.startswith("mask_"):
                    tau = {"mask_res": config.tau_resolution, "mask_width": config.tau_width,
                           "mask_depth": config.tau_depth}[name]
                    p.fill_(M.sigmoid_mu_range(tau)[end])
            costs.append(architecture_cost(describe(model), units))
        if config.learns("R"):  # the largest network at each reachable resolution
            per_axis = []
            for n in config.input_size:
                bins = n // 2 + 1
                reach = {(resolution_for_bins(k, n), k < bins): k for k in range(1, bins + 1)}
                per_axis.append([M.sigmoid_mu_for_size((k - 0.5) / max(bins - 1, 1),
                                                       config.tau_resolution, 1)
                                 for k in reach.values()])
            for mus in itertools.product(*per_axis):
                model.mask_res.copy_(torch.tensor(mus, dtype=model.mask_res.dtype))
                costs.append(architecture_cost(describe(model), units))
    return costs[0], max(costs[1:])


def complexity_loss(cost: Tensor, target: float) -> Tensor:
    """L_comp = (C / C_target - 1)^2 (§2.5)."""
    return (cost / target - 1.0) ** 2


def architecture_operators(arch) -> list[dict[str, Operator]]:
    """Per block of a frozen :class:`~dnarch_deploy.architecture.Architecture`, the operators it
    lowers to by cost (:func:`dnarch_deploy.block_ops.block_operators`)."""
    size = tuple(arch.input_size)
    return [block_operators(size, tuple(b.resolution), b.n_in, b.n_mid, b.n_out,
                            tuple(b.deployed_taps(size, arch.learn)),
                            tuple(b.cropped_axes(size)), stream=arch.stream_width,
                            conv_fft=tuple(b.conv_fft) if b.conv_fft else None)
            for b in arch.blocks]


def _layers(size, in_channels, out_channels, pooling, stream, operators,
            units: Units | BatchBlend) -> dict[str, float]:
    """Per layer (``encoder``, ``blocks.0`` ..., ``decoder``), a frozen network's cost."""
    length, dims = float(math.prod(size)), len(size)

    def edge(terms: dict) -> float:
        return float(sum(_edge(terms, units, dims).values()))

    return {
        "encoder": edge(encoder_cost(length, in_channels, float(stream))),
        **{f"blocks.{i}": float(sum(units.of(op.kind, op.macs, dims, _axis(name), op[2:])
                                    for name, op in ops.items()))
           for i, ops in enumerate(operators)},
        "decoder": edge(decoder_cost(length, float(stream), out_channels, pooling)),
    }


def layer_costs(arch, units: Units | BatchBlend = MACS) -> dict[str, float]:
    """The cost of a frozen architecture per layer, named as export names them: ``encoder``,
    ``blocks.0`` ... (the blocks in use, in order), ``decoder``; the values plus the call's
    fixed cost (``units.per_call``) sum to :func:`architecture_cost`."""
    return _layers(tuple(arch.input_size), 0 if arch.vocab_size else arch.in_channels,
                   arch.out_channels, arch.decoder_pooling(), arch.stream_width,
                   architecture_operators(arch), units)


def architecture_cost(arch, units: Units | BatchBlend = MACS) -> float:
    """The cost of a frozen :class:`~dnarch_deploy.architecture.Architecture` (discrete sizes):
    the theoretical figure of a found network, in MACs per sample (or ``units``)."""
    return sum(layer_costs(arch, units).values()) + units.per_call

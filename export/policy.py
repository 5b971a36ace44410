"""The lowering policy: which tactic each convolution gets and which form each resampled axis
gets, in one place.

- by cost (``--no-tune``): :func:`cheapest` (the portable convolution tactic with the fewest
  theoretical MACs) and :func:`cheapest_resample`;
- by measurement (``--tune``, the default): :func:`fastest` of each layer's onnxruntime timings
  (:mod:`export.tune` measures them), then :func:`fastest_network`: the per-layer mix against each
  single tactic for every block, as whole networks, so a tuned export is never slower, as
  measured, than the best single tactic;
- forced (``--tactic``): one tactic everywhere.

:func:`choose_lowering` applies the policy an export's options ask for and returns the evidence
that export's architecture.json records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lowering import block_resolution, resample_axes
from .resampling import resample_candidates, resample_macs
from .static import StaticNet
from .tactics import PORTABLE, TACTICS, conv_macs
from .tactics import tactic as tactic_class
from .tune import measure_resample, measure_tactics, time_networks

if TYPE_CHECKING:
    from .pipeline import ExportOptions


# --- by cost --------------------------------------------------------------------------------------


def tactic_costs(static: StaticNet) -> list[dict[str, float]]:
    """Per block, the theoretical cost of its convolution under each tactic."""
    costs = []
    for block in static.blocks:
        size, taps = block_resolution(block), tuple(block.conv.kernel.shape[1:])
        costs.append({t: conv_macs(t, block.n_in, size, taps) for t in TACTICS})
    return costs


def cheapest(costs: list[dict[str, float]]) -> list[str]:
    """Per block, the portable tactic with the lower theoretical cost times the tactic's
    ``cost_weight`` (its measured multiply-adds per second against the four-step's). The DFT op is
    only ever chosen by measurement (--tune): onnxruntime's DFT kernel is far slower than its
    operation count says (benchmarks/export_speed.py times it beside the other tactics)."""
    return [min(PORTABLE, key=lambda t: c[t] * tactic_class(t).cost_weight) for c in costs]


# The factored form runs four MatMuls (two of them batched over N2 small matrices) and three
# Transposes where the dense form runs one large GEMM: in onnxruntime on CPU it does about a third
# as many multiply-adds per second (measured, 1-D, 32 channels: break-even at a MAC ratio of ~3).
# Without timing (--no-tune) it is chosen only when it needs fewer than 1 / 3 of the dense MACs.
FACTORED_MAC_PENALTY = 3.0


def cheapest_resample(n: int, size: int) -> str:
    """By theoretical cost: ``factored`` when its MACs times FACTORED_MAC_PENALTY are fewer."""
    if "factored" not in resample_candidates(n, size):
        return "dense"
    factored = resample_macs("factored", n, size) * FACTORED_MAC_PENALTY
    return "factored" if factored < resample_macs("dense", n, size) else "dense"


def resample_evidence_by_cost(static: StaticNet) -> list[dict[str, list[dict]]]:
    """Per block, ``down`` / ``up``, per resampled axis: the tactic by :func:`cheapest_resample`
    and the MACs per line of each candidate."""
    return [
        {k: [{"tactic": cheapest_resample(n, size), "by": "cost",
              "macs_per_line": {t: resample_macs(t, n, size) for t in resample_candidates(n, size)}}
             for n, size, _ in v] for k, v in axes.items()}
        for axes in resample_axes(static)
    ]


def resample_choice(evidence: list[dict[str, list[dict]]]) -> list[dict[str, list[str]]]:
    """The per-axis tactics out of resampling evidence, measured (:func:`export.tune
    .measure_resample`) or by cost (:func:`resample_evidence_by_cost`)."""
    return [{k: [e["tactic"] for e in v] for k, v in block.items()} for block in evidence]


def resample_tactics_by_cost(static: StaticNet) -> list[dict[str, list[str]]]:
    """Per block, per resampled axis (``down`` / ``up``): :func:`cheapest_resample`."""
    return resample_choice(resample_evidence_by_cost(static))


# --- by measurement -------------------------------------------------------------------------------


def fastest(measured: list[dict[str, dict[str, float]]]) -> list[str]:
    """Per block, the tactic with the smallest median; ties go to the first in TACTICS order."""
    return [min(m, key=lambda t: m[t]["median_ms"]) for m in measured]


def fastest_network(
    static: StaticNet,
    per_layer: list[str],
    resample: list[dict[str, list[str]]],
    singles: tuple[str, ...] = TACTICS,
    batch: int = 1,
    threads: int = 0,
    repeats: int = 20,
) -> tuple[list[str], dict]:
    """The fastest whole network: the per-layer choice against every single tactic for all blocks.

    Each candidate assignment (``per_layer`` first, then each of ``singles``, the tactics valid for
    every block, where it differs from ``per_layer``) is lowered with the same ``resample``
    tactics, exported as the pipeline exports it and timed side by side
    (:func:`export.tune.time_networks`). The smallest median wins, ties going to the per-layer
    choice.

    Returns the kept tactics and the evidence: per candidate its ``name`` (``per-layer`` or the
    single tactic), ``tactics``, ``median_ms`` and ``min_ms``; the ``kept`` name and ``why``.
    With no alternative to the per-layer choice nothing is timed.
    """
    n = len(static.blocks)
    candidates = {"per-layer": list(per_layer)}
    for tactic in singles:
        if [tactic] * n != candidates["per-layer"]:
            candidates[tactic] = [tactic] * n
    evidence = {"by": "measured whole network", "batch": batch, "threads": threads,
                "repeats": repeats,
                "candidates": [{"name": k, "tactics": v} for k, v in candidates.items()]}
    if len(candidates) == 1:
        return list(per_layer), {**evidence, "kept": "per-layer",
                                 "why": "no other candidate: nothing timed"}
    timings = time_networks(static, list(candidates.values()), resample, batch, threads, repeats)
    for entry, times in zip(evidence["candidates"], timings):
        entry.update(times)
    best, runner_up = sorted(evidence["candidates"], key=lambda c: c["median_ms"])[:2]  # stable
    why = (f"smallest whole-network median in onnxruntime: {best['name']} {best['median_ms']:.3f}"
           f" ms (next: {runner_up['name']} {runner_up['median_ms']:.3f} ms)")
    return list(best["tactics"]), {**evidence, "kept": best["name"], "why": why}


# --- what an export asks for ----------------------------------------------------------------------


def choose_tactics(static: StaticNet, options: ExportOptions) -> tuple[list[str], list[dict]]:
    """Per block: the convolution tactic, and what it was chosen by (measured ms, theoretical
    cost, or forced); the evidence's ``resample`` holds, per resampled axis (``down`` / ``up``),
    the resampling tactic (``dense`` / ``factored``) and its evidence. Tuned, these are the
    per-layer winners (:func:`choose_lowering` then checks them as a whole network)."""
    n = len(static.blocks)
    resample = (measure_resample(static, 1, options.threads, options.repeats)
                if options.tune else resample_evidence_by_cost(static))
    if options.tactic is not None:
        tactics, evidence = [options.tactic] * n, [{"by": "forced"} for _ in range(n)]
    elif options.tune:
        measured = measure_tactics(static, 1, options.threads, options.repeats)
        evidence = [{"by": "measured", "ms": {t: v["median_ms"] for t, v in m.items()}}
                    for m in measured]
        tactics = fastest(measured)
    else:
        costs = tactic_costs(static)
        tactics, evidence = cheapest(costs), [{"by": "cost", "macs": c} for c in costs]
    for e, r in zip(evidence, resample):
        e["resample"] = r
    return tactics, evidence


def choose_lowering(
    static: StaticNet, options: ExportOptions
) -> tuple[list[str], list[dict[str, list[str]]], list[dict], dict | None]:
    """The whole policy for an export: (convolution tactic per block, resampling tactics per
    block, per-block evidence, whole-network evidence or None). Tuned and not forced, the
    per-layer choice is kept only if no single tactic everywhere is faster as a whole network."""
    tactics, evidence = choose_tactics(static, options)
    resample = resample_choice([e["resample"] for e in evidence])
    network = None
    if options.tune and options.tactic is None:
        singles = tuple(t for t in TACTICS if all(t in e["ms"] for e in evidence))
        tactics, network = fastest_network(static, tactics, resample, singles, 1,
                                           options.threads, options.repeats)
    return tactics, resample, evidence, network

"""The lowering policy: which tactic each convolution gets and which form each resampled axis
gets, in one place.

- by cost (``--no-tune``): :func:`cheapest` (the portable convolution tactic with the fewest
  theoretical MACs) and :func:`cheapest_resample`;
- by measurement (``--tune``, the default): :func:`fastest` of each layer's onnxruntime timings
  (:mod:`export.tune` measures them) at every batch size of ``--batch`` (default 1 and 32), then
  :func:`fastest_network`: the per-layer mix against each single tactic for every block, as whole
  networks at every batch, so a tuned export is never slower, as measured, than the best single
  tactic. With more than one batch the kept candidate is the one whose worst slowdown against the
  fastest at any measured batch is smallest (:func:`least_regret`): one graph serves every batch
  (the batch axis is dynamic), so it is chosen for all of them. Last, where it applies,
  :func:`fastest_stream`: the per-axis resampling against the stream carried as its spectrum
  (:mod:`export.spectrum`), as whole networks, by the same rule;
- forced (``--tactic``): one tactic everywhere.

:func:`choose_lowering` applies the policy an export's options ask for and returns the evidence
that export's architecture.json records.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dnarch_deploy.operators import DENSE_MAX_POSITIONS, conv_tactics

from .lowering import (  # the choices by cost live beside lower(), which defaults to them
    block_resolution,
    cheapest,
    resample_choice,
    resample_evidence_by_cost,
    spectrum_resample,
    tactic_costs,
)
from .spectrum import why_not
from .static import StaticNet
from .tactics import TACTICS
from .tune import NetworkExports, measure_resample, measure_tactics, time_networks

if TYPE_CHECKING:
    from .pipeline import ExportOptions


# --- by measurement -------------------------------------------------------------------------------


def fastest(measured: list[dict[str, dict[str, float]]]) -> list[str]:
    """Per block, the tactic with the smallest median; ties go to the first in TACTICS order."""
    return [min(m, key=lambda t: m[t]["median_ms"]) for m in measured]


def least_regret(ms_by_batch: dict[str, dict[str, float]]) -> str:
    """The candidate (key of each inner dict) whose worst ratio to the fastest candidate at the
    same batch, over the batches (outer keys), is smallest; ties go to the first. At one batch:
    the fastest. Only candidates measured at every batch take part."""
    tables = list(ms_by_batch.values())
    names = [n for n in tables[0] if all(n in t for t in tables)]

    def worst(name: str) -> float:
        return max(t[name] / min(t[n] for n in names) for t in tables)

    return min(names, key=worst)


def regret(ms_by_batch: dict[str, dict[str, float]], name: str) -> dict[str, float]:
    """Per batch, candidate ``name``'s time over the fastest candidate's at that batch."""
    return {b: t[name] / min(t.values()) for b, t in ms_by_batch.items()}


def fastest_network(
    static: StaticNet,
    per_layer: list[str],
    resample: list[dict[str, list[str]]],
    singles: tuple[str, ...] = TACTICS,
    batch: int | list[int] = 1,
    threads: int = 0,
    repeats: int = 20,
    extra: dict[str, list[str]] | None = None,
    exports: NetworkExports | None = None,
) -> tuple[list[str], dict]:
    """The fastest whole network: the per-layer choice against every single tactic for all blocks.

    Each candidate assignment (``per_layer`` first, then ``extra`` (e.g. the per-layer winners at
    each batch), then each of ``singles``, the tactics valid for every block, where it differs
    from those before) is lowered with the same ``resample`` tactics, exported as the pipeline
    exports it and timed side by side (:func:`export.tune.time_networks`) at every ``batch``. The
    kept candidate is :func:`least_regret`'s (at one batch: the smallest median), ties going to the
    per-layer choice.

    Returns the kept tactics and the evidence: per candidate its ``name`` (``per-layer``, an extra
    name, or the single tactic), ``tactics``, ``median_ms`` and ``min_ms`` (at the first batch),
    ``ms_by_batch``; ``batches`` (the batches the choice was made for), the ``kept`` name and
    ``why``. With no alternative to the per-layer choice nothing is timed.
    """
    batches = [batch] if isinstance(batch, int) else list(batch)
    n = len(static.blocks)
    candidates = {"per-layer": list(per_layer)}
    for name, tactics in [*(extra or {}).items(), *((t, [t] * n) for t in singles)]:
        if tactics not in candidates.values():
            candidates[name] = list(tactics)
    evidence = {"by": "measured whole network", "batch": batches[0], "batches": batches,
                "threads": threads, "repeats": repeats,
                "candidates": [{"name": k, "tactics": v} for k, v in candidates.items()]}
    if len(candidates) == 1:
        return list(per_layer), {**evidence, "kept": "per-layer",
                                 "why": "no other candidate: nothing timed"}
    table: dict[str, dict[str, float]] = {}
    by_batch = time_networks(static, list(candidates.values()), resample, batches, threads,
                             repeats, exports)
    for b, timings in zip(batches, by_batch):
        table[str(b)] = {c["name"]: t["median_ms"] for c, t in zip(evidence["candidates"], timings)}
        for entry, times in zip(evidence["candidates"], timings):
            entry.setdefault("ms_by_batch", {})[str(b)] = times["median_ms"]
            if b == batches[0]:
                entry.update(times)
    kept = least_regret(table)
    best = next(c for c in evidence["candidates"] if c["name"] == kept)
    runner_up = min((c for c in evidence["candidates"] if c["name"] != kept),
                    key=lambda c: max(regret(table, c["name"]).values()))
    def timed(c: dict) -> str:  # 'per-layer B=1 (B=1 0.638 ms, B=32 15.945 ms)'
        return f"{c['name']} (" + ", ".join(f"B={b} {ms:.3f} ms"
                                            for b, ms in c["ms_by_batch"].items()) + ")"

    rule = ("smallest whole-network median in onnxruntime" if len(batches) == 1 else
            "smallest worst slowdown against the fastest at any batch (onnxruntime medians)")
    why = f"{rule}: {timed(best)}; next: {timed(runner_up)}"
    return list(best["tactics"]), {**evidence, "kept": kept, "why": why,
                                   "regret": regret(table, kept)}


def fastest_stream(
    static: StaticNet,
    tactics: list[str],
    resample: list[dict[str, list[str]]],
    batch: list[int],
    threads: int = 0,
    repeats: int = 20,
    exports: NetworkExports | None = None,
) -> tuple[list[dict[str, list[str]]], dict]:
    """Per-axis resampling (``resample``) against the stream carried as its spectrum
    (:mod:`export.spectrum`), both with ``tactics``, timed as whole networks at every batch; the
    kept one is :func:`least_regret`'s, ties to per-axis. Returns the kept resampling tactics and
    the evidence (``kept``, ``why``, ``ms_by_batch``); nothing is timed where the spectrum does not
    apply."""
    reason = why_not(static)
    if reason is not None:
        return resample, {"kept": "per-axis", "why": f"spectrum not timed: {reason}"}
    spectral = spectrum_resample(static)
    table = {}
    by_batch = time_networks(static, [(tactics, resample), (tactics, spectral)], resample, batch,
                             threads, repeats, exports)
    for b, (per_axis, spectrum) in zip(batch, by_batch):
        table[str(b)] = {"per-axis": per_axis["median_ms"], "spectrum": spectrum["median_ms"]}
    kept = least_regret(table)
    times = "; ".join(f"B={b} " + ", ".join(f"{k} {ms:.3f} ms" for k, ms in t.items())
                      for b, t in table.items())
    return (spectral if kept == "spectrum" else resample), {
        "kept": kept, "ms_by_batch": table, "regret": regret(table, kept),
        "why": f"smallest worst slowdown against the fastest at any batch: {times}"}


# --- what an export asks for ----------------------------------------------------------------------


def choose_tactics(static: StaticNet, options: ExportOptions) -> tuple[list[str], list[dict]]:
    """Per block: the convolution tactic, and what it was chosen by (measured ms per batch,
    theoretical cost, or forced); the evidence's ``resample`` holds, per resampled axis (``down`` /
    ``up``), the resampling tactic (``dense`` / ``factored``) and its evidence. Tuned, these are
    the per-layer winners by :func:`least_regret` over ``options.batch`` (:func:`choose_lowering`
    then checks them as a whole network)."""
    n = len(static.blocks)
    for i, block in enumerate(static.blocks):  # a forced tactic must run every block
        size = block_resolution(block)
        if options.tactic is not None and options.tactic not in conv_tactics(size):
            raise ValueError(
                f"--tactic {options.tactic}: block {i} computes on {math.prod(size)} positions "
                f"({'x'.join(map(str, size))}), more than the {options.tactic} tactic takes "
                f"({DENSE_MAX_POSITIONS}); choose another --tactic, or let export choose")
    batches = options.batch
    resample = (measure_resample_batches(static, batches, options.threads, options.repeats)
                if options.tune else resample_evidence_by_cost(static))
    if options.tactic is not None:
        tactics, evidence = [options.tactic] * n, [{"by": "forced"} for _ in range(n)]
    elif options.tune:
        by_batch = dict(zip(map(str, batches),
                            measure_tactics(static, batches, options.threads, options.repeats)))
        evidence = []
        for i in range(n):
            ms = {b: {t: v["median_ms"] for t, v in m[i].items()} for b, m in by_batch.items()}
            evidence.append({"by": "measured", "batches": list(batches),
                             "ms": ms[str(batches[0])], "ms_by_batch": ms,
                             "fastest_by_batch": {b: min(t, key=t.get) for b, t in ms.items()}})
        tactics = [least_regret(e["ms_by_batch"]) for e in evidence]
    else:
        costs = tactic_costs(static)
        tactics, evidence = cheapest(costs), [{"by": "cost", "macs": c} for c in costs]
    for e, r in zip(evidence, resample):
        e["resample"] = r
    return tactics, evidence


def measure_resample_batches(static: StaticNet, batches: list[int], threads: int, repeats: int
                             ) -> list[dict[str, list[dict]]]:
    """:func:`export.tune.measure_resample` at every batch; a timed axis keeps
    :func:`least_regret`'s tactic, its ``ms`` at the first batch and ``ms_by_batch``."""
    runs = dict(zip(map(str, batches), measure_resample(static, batches, threads, repeats)))
    first = runs[str(batches[0])]
    for i, block in enumerate(first):
        for kind, axes in block.items():
            for j, entry in enumerate(axes):
                if entry["by"] != "measured":
                    continue
                ms = {b: run[i][kind][j]["ms"] for b, run in runs.items()}
                entry["ms_by_batch"] = ms
                entry["tactic"] = least_regret(ms)
    return first


def choose_lowering(
    static: StaticNet, options: ExportOptions, exports: NetworkExports | None = None
) -> tuple[list[str], list[dict[str, list[str]]], list[dict], dict | None]:
    """The whole policy for an export: (convolution tactic per block, resampling tactics per
    block, per-block evidence, whole-network evidence or None). Tuned and not forced, the
    per-layer choice is kept only if no single tactic everywhere (nor the per-layer winners at
    one batch) is better as a whole network over ``options.batch``. The whole networks timed are
    exported through ``exports`` (the pipeline then ships the kept one without exporting it
    again)."""
    exports = exports or NetworkExports(static)
    tactics, evidence = choose_tactics(static, options)
    resample = resample_choice([e["resample"] for e in evidence])
    network = None
    if options.tune and options.tactic is None:
        singles = tuple(t for t in TACTICS if all(t in e["ms"] for e in evidence))
        extra = {}
        if len(options.batch) > 1:
            extra = {f"per-layer B={b}": [e["fastest_by_batch"][str(b)] for e in evidence]
                     for b in options.batch}
        tactics, network = fastest_network(static, tactics, resample, singles, options.batch,
                                           options.threads, options.repeats, extra, exports)
    if options.tune:
        resample, stream = fastest_stream(static, tactics, resample, options.batch,
                                          options.threads, options.repeats, exports)
        network = {**(network or {}), "stream": stream}
    return tactics, resample, evidence, network

"""The base network's measured onnxruntime time: what a ``--cost latency`` budget is a share of.

A latency table prices operators timed alone, and errs most on the base CCNN, the budget's
reference; so the search measures the base instead, exported as ``python -m export.onnx
--no-tune`` would ship it, in one session at the budget's batches, one thread.

The table's milliseconds are those of the hour it was measured, and this machine's speed drifts
between calls, so the base's time is put in the table's: a probe is timed in turns with the base
and the base's milliseconds divided by how much slower than tabled the probe ran
(:func:`base_in_table_time`). The probe is eight fixed table points before training
(``probe="generic"``), and during training the network the masks describe (``probe="found"``):
its measured time over its predicted one is the slowdown its budget has to meet. Why these
probes, with the figures: docs/cost.md "Latency checks".
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx
import torch

from dnarch_deploy import Architecture, DNArch, ModelConfig
from dnarch_deploy.calibration import calibrate
from dnarch_deploy.cost import Units, architecture_cost, base_cost
from dnarch_deploy.latency import LatencyTable, load_table
from dnarch_deploy.rundir import RunError, load_weights

from .emit import to_onnx
from .latency_table import Case, case_sessions, global_taps, grid, macs, median_ms, point_shape
from .lowering import lower
from .pipeline import ExportOptions
from .policy import choose_lowering
from .static import freeze, materialize
from .timing import measure, random_feeds, runner, session
from .tune import example_input

REPEATS = 40  # timed calls per batch (the median is kept)
ROUNDS = 4  # rounds of probe points and base calls (base_in_table_time)


# --- the probe: table points timed again ---------------------------------------------------------

# Table points timed again to tell how fast this machine runs now against the table (it ran
# them at 0.99x to 1.40x their tabled time from one call to the next: benchmarks/base_drift.py).
# The generic probe: the base CCNN's kinds, at its width, on a sequence and an image.
SPEED_PROBE_KINDS = ("linear", "pointwise", "conv.direct", "add")
SPEED_PROBE_SIZES = ((1024,), (32, 32))


def speed_probe_cases() -> list[Case]:
    """The generic probe: each of SPEED_PROBE_KINDS at 32 channels on each of SPEED_PROBE_SIZES
    (a direct convolution with the grid's short kernel, 9 taps an axis)."""
    return [Case(kind, 32, size, taps=tuple(min(9, t) for t in global_taps(size))
                 if kind == "conv.direct" else ())
            for kind in SPEED_PROBE_KINDS for size in SPEED_PROBE_SIZES]


def _log_distance(case: Case, op_macs: float, shape: tuple[int, int, int]) -> float:
    """How far ``case`` is from an operator of ``op_macs`` and ``shape`` (width, positions,
    taps; 0: unknown): the summed |log| of the ratios of the fields both know."""
    width, positions, taps = point_shape(case)
    ours = (macs(case), width, positions or math.prod(case.size), taps)
    return sum(abs(math.log(x / y)) for x, y in zip(ours, (op_macs, *shape)) if x > 0 and y > 0)


def nearest_cases(operators: list[tuple], table: LatencyTable, batches: list[int],
                  most: int = 8) -> list[tuple[Case, float]]:
    """A probe made of a network's own operators: for each of ``operators`` (kind, MACs, spatial
    axes, a resampling's axis, (width, positions, taps) as :func:`point_shape` counts them with
    0 where unknown, its share of the network's time), the grid case of its kind and axes (and
    axis) that the table measured at every one of ``batches`` nearest it
    (:func:`_log_distance`); (case, summed share) for the ``most`` cases of largest share.
    Timed again, such points drift as the network's operators do: one kind can slow while
    another keeps its speed (benchmarks/base_drift.py: in one fast hour the generic probe ran
    at 0.68x its tabled time and GunPoint's base's own points at 0.86x; export.base_latency says
    why the search still uses the generic one)."""
    known = {(k, str(c)): c for k, cs in grid().items() for c in cs}
    measured = [{(k, p.shape) for k, ps in table.points[table.nearest_batch(b)].items()
                 for p in ps} for b in batches]
    shares: dict[Case, float] = {}
    for kind, op_macs, dims, axis, shape, share in operators:
        cases = [c for (k, name), c in known.items()
                 if k == kind and len(c.size) == dims and (axis is None or c.axis == axis)
                 and all((k, name) in m for m in measured)]
        if cases and op_macs > 0:
            case = min(cases, key=lambda c: _log_distance(c, op_macs, shape))
            shares[case] = shares.get(case, 0.0) + share
    return sorted(shares.items(), key=lambda cs: -cs[1])[:most]


def probe_sessions(threads: int, cases: list[Case] | None = None) -> list[tuple]:
    """(its ONNX graph, an onnxruntime session) of each of ``cases`` (default: the generic
    :func:`speed_probe_cases`). Their random weights and example inputs leave the caller's torch
    generator as it was."""
    with torch.random.fork_rng(devices=[]):  # the CPU generator only: no CUDA context
        return list(case_sessions(cases or speed_probe_cases(), threads))


def probe_times(sessions: list[tuple], batches: list[int]) -> dict[int, list[float]]:
    """Per batch, the median milliseconds of a call of each probe case (:func:`probe_sessions`)
    now."""
    return {b: [median_ms(runner(sess, random_feeds(sub, b))) for sub, sess in sessions]
            for b in batches}


def speed_against(table: LatencyTable, times: dict[int, list[float]],
                  cases: list[Case] | None = None,
                  weights: list[float] | None = None) -> dict[int, float]:
    """Per batch, how many times its tabled time this machine took for the probe ``cases``
    (default: the generic ones) just now (:func:`probe_times`): of each case, the call's time
    over the table's (the operator's predicted milliseconds plus a call's fixed cost); over the
    cases, their median, or with ``weights`` (each case's share of a network's time,
    :func:`nearest_cases`) their weighted mean, the network's own slowdown. 1.0: as fast as
    when the table was measured; 1.4: 40 % slower."""
    cases = cases or speed_probe_cases()
    speed = {}
    for b, measured in times.items():
        ratios = [ms / (table.predict_ms(case.kind, macs(case), b, len(case.size),
                                         case.axis if case.out else None, point_shape(case))
                        + table.overhead(b))
                  for case, ms in zip(cases, measured, strict=True)]
        speed[b] = (statistics.median(ratios) if weights is None else
                    sum(w * r for w, r in zip(weights, ratios, strict=True)) / sum(weights))
    return speed


# --- the base -------------------------------------------------------------------------------------


def random_inputs(config: ModelConfig, samples: int, generator: torch.Generator) -> torch.Tensor:
    """``samples`` random inputs of the network's shape (token ids below its vocabulary)."""
    if config.vocab_size:
        return torch.randint(0, config.vocab_size, (samples, *config.input_size),
                             generator=generator)
    return torch.randn(samples, config.in_channels, *config.input_size, generator=generator)


def calibrated(model: DNArch, seed: int = 0) -> DNArch:
    """``model`` in eval mode with its BatchNorm statistics taken from random inputs."""
    generator = torch.Generator().manual_seed(seed)
    batches = [random_inputs(model.config, 16, generator) for _ in range(2)]
    return calibrate(model, batches, show_progress=False).eval()


def untrained_export(model: DNArch) -> tuple[onnx.ModelProto, Architecture]:
    """(the ONNX graph ``python -m export.onnx --no-tune`` ships for a calibrated ``model``, its
    frozen architecture)."""
    frozen = freeze(model)
    static = materialize(model, frozen)
    tactics, resample, _, _ = choose_lowering(static, ExportOptions(tune=False))
    return to_onnx(lower(static, tactics, resample), (example_input(static),)), frozen.architecture


def base_session(config: ModelConfig, threads: int = 1) -> tuple[onnx.ModelProto, object]:
    """(the graph, an onnxruntime session) of the base network of ``config`` (its CCNN_{D,H}:
    nothing learned), exported as shipped."""
    with torch.random.fork_rng(devices=[]):  # the CPU generator only: no CUDA context
        torch.manual_seed(0)
        graph, _ = untrained_export(calibrated(DNArch(dataclasses.replace(config, learn="none"))))
    return graph, session(graph, threads)


def _median_ms(base: tuple, config: ModelConfig, batch: int, repeats: int) -> float:
    """The median milliseconds of ``repeats`` calls of the base (:func:`base_session`)."""
    graph, sess = base
    feeds = random_feeds(graph, batch, config.vocab_size)
    return measure([runner(sess, feeds)], repeats)[0]["median_ms"]


class _Recorder:
    """Units that price as ``units`` do and keep what they priced: (kind, MACs, spatial axes,
    a resampling's axis, (width, positions, taps), milliseconds) of each operator."""

    base_ms = None  # base_cost prices the operators, not a measured time

    def __init__(self, units: Units):
        self.units, self.priced = units, []

    def of(self, kind, macs, dims=1, axis=None, shape=(0, 0, 0)):
        ms = self.units.of(kind, macs, dims, axis, shape)
        self.priced.append((kind, float(macs), dims, axis, tuple(shape), float(ms)))
        return ms

    @property
    def per_call(self) -> float:
        return self.units.per_call


def base_probe(config: ModelConfig, table: LatencyTable,
               batches: Sequence[int]) -> tuple[list[Case], list[float] | None]:
    """(cases, weights): the table's points nearest the base network's own operators, each
    weighted by its share of the base's predicted time, averaged over ``batches``
    (:func:`nearest_cases`); the generic probe, unweighted, if none is
    found."""
    positions = math.prod(config.input_size)  # the base runs every operator at full size
    operators = []
    for b in batches:
        recorder = _Recorder(Units(table, b))
        total = base_cost(config, recorder)
        operators += [(k, m, d, a, (w, p or positions, t), ms / total / len(batches))
                      for k, m, d, a, (w, p, t), ms in recorder.priced]
    chosen = nearest_cases(operators, table, list(batches))
    if not chosen:
        return speed_probe_cases(), None
    return [c for c, _ in chosen], [w for _, w in chosen]


def found_probe(model: DNArch, table: LatencyTable, batches: Sequence[int], threads: int = 1,
                repeats: int = REPEATS // ROUNDS) -> Callable[[], dict[int, float]]:
    """The found network as its own probe: a function that times ``model``, exported as shipped
    (its masks frozen; its weights do not change its time), and returns per batch its measured
    milliseconds over the table's prediction for its architecture (:func:`architecture_cost`,
    the figure the search's cost reaches for it)."""
    graph, arch = untrained_export(calibrated(model))
    found = (graph, session(graph, threads))
    predicted = {b: architecture_cost(arch, Units(table, b)) for b in batches}
    return lambda: {b: _median_ms(found, model.config, b, repeats) / predicted[b]
                    for b in batches}


def table_probe(config: ModelConfig, table: LatencyTable, batches: Sequence[int],
                threads: int = 1, probe: str = "generic") -> Callable[[], dict[int, float]]:
    """The table's own points as the probe: a function that times them and returns per batch how
    many times their tabled time they took (:func:`speed_against`): eight
    fixed points (``"generic"``) or those nearest the base's operators (``"base"``,
    :func:`base_probe`)."""
    cases, weights = (base_probe(config, table, batches) if probe == "base"
                      else (speed_probe_cases(), None))
    sessions = probe_sessions(threads, cases)
    return lambda: speed_against(table, probe_times(sessions, list(batches)), cases, weights)


# base_in_table_time's probes: fixed points, the base's own, or the found network itself
PROBES = ("generic", "base", "found")


def base_in_table_time(config: ModelConfig, batches: Sequence[int], table: LatencyTable,
                       threads: int = 1, rounds: int = ROUNDS, probe: str = "generic",
                       found: DNArch | None = None) -> dict[str, list[float]]:
    """The base's milliseconds in ``table``'s time at each of ``batches``: ``{"base_ms": ...}``,
    the base's measured time over ``speed``, how many times their predicted time the probe took:
    with ``probe`` ``"generic"`` eight fixed points of the table, with ``"base"`` the table's
    points nearest the base's own operators (module docstring: why neither is the base itself),
    with ``"found"`` the network ``found`` (:func:`found_probe`). Timed in ``rounds``, each the
    probe then REPEATS / rounds calls of the base, so that the two see the same speed; each
    figure is the median over rounds (``measured_ms`` and ``speed`` too, for the note)."""
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
    if (probe == "found") != (found is not None):
        raise ValueError("the found network is the probe 'found' needs, and only it")
    base = base_session(config, threads)
    if found is not None:
        speed_now = found_probe(found, table, batches, threads, REPEATS // rounds)
    else:
        speed_now = table_probe(config, table, batches, threads, probe)
    runs = []
    for _ in range(rounds):
        speed = speed_now()
        runs.append([(_median_ms(base, config, b, REPEATS // rounds), speed[b]) for b in batches])
    per_batch = list(zip(*runs))  # per batch, its (measured, speed) of every round
    return {"base_ms": [statistics.median(m / v for m, v in r) for r in per_batch],
            "measured_ms": [statistics.median(m for m, _ in r) for r in per_batch],
            "speed": [statistics.median(v for _, v in r) for r in per_batch]}


class MeasurementError(RuntimeError):
    """Timing the base network failed; the message is for the user."""


def base_milliseconds(config: ModelConfig, batches: Sequence[int], table_path: str = "",
                      found: DNArch | None = None) -> list[float]:
    """The base network's onnxruntime milliseconds at ``batches`` in the time of the latency
    table ``table_path`` (empty: this machine's, else the bundled one), measured in this process,
    1 thread (:func:`base_in_table_time`). ``found``: the search's model, whose network (the
    architecture its masks describe) is timed beside the base as the probe (a copy, on the CPU:
    the model and the caller's random streams are left as they were); none: the table's fixed
    points. Says them in a note; raises MeasurementError when the timing fails."""
    try:
        with torch.random.fork_rng(devices=[]):
            probe = copy.deepcopy(found).cpu() if found is not None else None
            table = load_table(table_path or None, threads=1, batches=list(batches))
            timed = base_in_table_time(config, list(batches), table,
                                       probe="found" if probe is not None else "generic",
                                       found=probe)
    except (RuntimeError, ValueError, OSError) as e:  # an export or a session that failed
        raise MeasurementError(f"timing the base network for --cost latency failed: {e} "
                               f"(--base-ms gives its times instead)") from e
    at = ", ".join(f"{ms:.4g} ms at batch {b}" for b, ms in zip(batches, timed["measured_ms"]))
    speed = ", ".join(f"{v:.2f}x" for v in timed["speed"])
    shares = ", ".join(f"{ms:.4g}" for ms in timed["base_ms"])
    if found is not None:
        probe_text = f"the network the masks describe ran at {speed} its predicted time"
        reference = "the found network's"
    else:
        probe_text = f"the latency table's probe points ran at {speed} their tabled time"
        reference = "the table's (--base-ms with --latency-checks 0 pins it)"
    print(f"note: the base network runs in {at} here (onnxruntime, 1 thread), while "
          f"{probe_text}: the budget is a share of {shares} ms, the base's time in {reference}",
          file=sys.stderr)
    return timed["base_ms"]


def main(argv: list[str] | None = None) -> int:
    """``python -m export.base_latency --model JSON --batch 1 --batch 32``: prints
    ``{"base_ms": [...], "measured_ms": [...], "speed": [...]}`` (:func:`base_in_table_time`,
    against this machine's latency table or ``--latency-table``'s), the base's milliseconds at
    each batch (search.run's --cost latency calls :func:`base_milliseconds` in-process)."""
    parser = argparse.ArgumentParser(prog="python -m export.base_latency",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="the model's config as JSON (config.json's \"model\")")
    parser.add_argument("--batch", type=int, action="append", required=True,
                        help="a batch size (repeatable)")
    parser.add_argument("--probe", choices=PROBES, default="generic",
                        help="what is timed beside the base: eight fixed points of the table, "
                             "those nearest the base's own operators, or the found network "
                             "(--weights)")
    parser.add_argument("--weights", default="",
                        help="with --probe found: the found network's weights (a DNArch of "
                             "--model, safetensors; its masks say the architecture)")
    parser.add_argument("--latency-table", default="",
                        help="the latency table whose time the base is put in (default: this "
                             "machine's, else the bundled one)")
    args = parser.parse_args(argv)
    try:
        config = ModelConfig(**json.loads(args.model))
    except (ValueError, TypeError) as e:  # bad JSON, unknown or invalid fields
        parser.error(f"--model: not a model config: {e}")
    if min(args.batch) < 1:
        parser.error(f"every --batch must be >= 1, got {args.batch}")
    if (args.probe == "found") != bool(args.weights):
        parser.error("--weights is the found network --probe found times, and only it")
    found = None
    if args.weights:
        found = DNArch(config)
        try:
            load_weights(found, Path(args.weights))
        except RunError as e:
            parser.error(str(e))
    table = load_table(args.latency_table or None, threads=1, batches=args.batch)
    print(json.dumps(base_in_table_time(config, args.batch, table, probe=args.probe,
                                        found=found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

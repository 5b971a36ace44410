"""The base network's measured onnxruntime time: what a ``--cost latency`` budget is a share of.

A latency table prices each operator timed alone. Inside a whole network onnxruntime keeps or
changes layouts between operators, and the base CCNN_{D,H}, the budget's reference, is where the
table errs most: it predicted the base at 1.40x / 1.28x its measured time on 8x8 images (batch 1 /
32; the width of 32 runs as one NCHWc chain) and at 0.71x on 251 samples at batch 32, where
random networks of the search space were predicted at 0.78-1.03x (medians at those shapes and
batches; ``benchmarks/latency_prediction.py``, ``benchmarks/results/latency_prediction.md``).
A found network's cost over a *predicted* base carries the base's error whole, so the search
measures the base instead: exported as ``python -m export.onnx --no-tune`` would ship it (random
weights and BatchNorm statistics; time does not depend on them) and timed in one session at the
budget's batches, one thread, before training starts.

The table's milliseconds are those of the hour it was measured, and the machine's speed drifts:
this machine ran the table's own operators at 0.99x to 1.40x their tabled time from one call to
the next (benchmarks/base_drift.py), and a base timed in a slow moment, divided into a found
network's predicted milliseconds, let the search overspend its budget by as much. So the
base's time is put in the table's time: a few of the table's points are timed in turns with the
base (:func:`export.latency_table.probe_times`), and the base's milliseconds divided by how
much slower than tabled they ran (:func:`base_in_table_time`).

Which points: eight fixed ones (``probe="generic"``, the default), not the base's own
(``probe="base"``, :func:`base_probe`). Drift is not the same for every operator: in one fast
hour the fixed points ran at 0.68x their tabled time and the base's own at 0.86x. The base's
own points put the base's time in the table's more steadily (benchmarks/base_drift.py), but a
budget is met when the *found* network's operators drift as the probe's do, and found networks
are made of smaller operators than the base. In that hour, with the base's own points,
GunPoint's networks ran at 0.21 of the base's time at budget 0.25 and 0.91 at 1 (batch 1); with
the fixed points, in the same hour, at 0.28 and 1.30 (README, "Budget honesty").

So the search, as it trains, also takes the network its masks describe as the probe
(``probe="found"``, :func:`found_probe`): that network's measured time over its predicted one is
the slowdown the budget has to meet, and the base's time divided by it is the base in the time of
the found network's own operators (``search.train``'s latency checks).
"""

from __future__ import annotations

import argparse
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
from .latency_table import (
    Case,
    nearest_cases,
    probe_sessions,
    probe_times,
    speed_against,
    speed_probe_cases,
)
from .lowering import lower
from .pipeline import ExportOptions
from .policy import choose_lowering
from .static import freeze, materialize
from .timing import measure, random_feeds, runner, session
from .tune import example_input

REPEATS = 40  # timed calls per batch (the median is kept)
ROUNDS = 4  # rounds of probe points and base calls (base_in_table_time)


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
    (:func:`~export.latency_table.nearest_cases`); the generic probe, unweighted, if none is
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
    many times their tabled time they took (:func:`~export.latency_table.speed_against`): eight
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


def main(argv: list[str] | None = None) -> int:
    """``python -m export.base_latency --model JSON --batch 1 --batch 32``: prints
    ``{"base_ms": [...], "measured_ms": [...], "speed": [...]}`` (:func:`base_in_table_time`,
    against this machine's latency table or ``--latency-table``'s), the base's milliseconds at
    each batch (search.run's --cost latency runs it in a process of its own)."""
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

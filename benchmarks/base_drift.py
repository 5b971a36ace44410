"""How steady the base's time is, as measured and in the latency table's time.

A ``--cost latency`` budget is a share of the base network's time, which the search measures
before it trains (export.base_latency). This machine's speed drifts between hours, so the
search puts the base's time in the latency table's time: it times some of the table's own
points in turns with the base and divides by how much slower than tabled they ran. This calls
that measurement (``base_in_table_time``, as ``python -m export.base_latency`` does) several
times on one task, with each probe in turn (``base``: the table's points nearest the base's own
operators, weighted by their share of its time; ``generic``: eight fixed points), and reports,
per call, the base's measured milliseconds, the machine's speed against the table and the base
in the table's time, at batches 1 and 32, with each column's spread (max / min). The table's
own prediction of the base is printed beside them.

    python -m benchmarks.base_drift --task ucr:GunPoint --calls 5
"""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from benchmarks import harness
from dnarch_deploy.cost import Units, base_cost
from dnarch_deploy.latency import load_table
from export.base_latency import PROBES, base_in_table_time
from search.config import parse_args
from search.resolve import model_config
from search.tasks import TaskError, load_task

BATCHES = [1, 32]


def spread(values: list[float]) -> str:
    return f"{max(values) / min(values):.2f}"


def report(opt, mcfg, table, rows: dict, argv: list[str]) -> str:
    """The report: per probe, each call's figures and each column's spread."""
    predicted = [base_cost(mcfg, Units(table, b)) for b in BATCHES]
    lines = [f"# The base's time, measured and in the latency table's time: {opt.task}", "",
             *harness.header(__file__, argv, harness.ORT, machine_note="; one thread"),
             f"{opt.calls} calls of export.base_latency.base_in_table_time with each probe "
             f"({', '.join(PROBES)}) in turn, {opt.gap:g} s apart; latency table {table.source} "
             f"(measured {table.header.get('date', '?')}). The table predicts the base at "
             f"{predicted[0]:.4g} / {predicted[1]:.4g} ms (batch 1 / 32)."]
    for probe in PROBES:
        lines += ["", f"Probe `{probe}`:", "",
                  "| call | measured ms B=1 / B=32 | speed against the table B=1 / B=32 "
                  "| in the table's time, ms B=1 / B=32 |", "|---|---|---|---|"]
        for i, r in enumerate(rows[probe]):
            m, v, t = r["measured_ms"], r["speed"], r["base_ms"]
            lines.append(f"| {i} | {m[0]:.4g} / {m[1]:.4g} | {v[0]:.2f} / {v[1]:.2f} | "
                         f"{t[0]:.4g} / {t[1]:.4g} |")
        col = {k: list(zip(*(r[k] for r in rows[probe])))
               for k in ("measured_ms", "speed", "base_ms")}
        lines.append("| spread (max / min) | " + " | ".join(
            f"{spread(col[k][0])} / {spread(col[k][1])}"
            for k in ("measured_ms", "speed", "base_ms")) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--task", default="ucr:GunPoint")
    parser.add_argument("--calls", type=int, default=5, help="measurements, one after another")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between calls")
    harness.add_report(parser, __file__)
    opt = parser.parse_args(argv)
    if opt.calls < 1 or opt.gap < 0:
        parser.error(f"--calls must be >= 1 and --gap >= 0, got {opt.calls} and {opt.gap}")
    try:
        mcfg = model_config(parse_args(["--task", opt.task, "--cost", "latency"])[0],
                            load_task(opt.task, seed=0))
    except TaskError as e:
        parser.error(f"--task {opt.task}: {e}")
    torch.set_num_threads(1)
    table = load_table(threads=1, batches=BATCHES)
    rows = {probe: [] for probe in PROBES}
    for i in tqdm(range(opt.calls), desc="base timings"):
        if i and opt.gap:
            time.sleep(opt.gap)
        for probe in PROBES:  # in turns, so that both see the same hours
            rows[probe].append(base_in_table_time(mcfg, BATCHES, table, probe=probe))
    harness.publish(report(opt, mcfg, table, rows, harness.arguments(argv)), opt.out)


if __name__ == "__main__":
    main()

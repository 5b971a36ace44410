"""Where an exported network's time goes, by operator kind: onnxruntime's profiler on the
lowered ONNX graph beside torch.profiler on the static module in eager PyTorch, one input, same
threads.

benchmarks.export_speed says whether onnxruntime beats PyTorch; this says which operators make
the difference. One of export_speed's synthetic 1-D networks (``found`` or ``max``), lowered with
one tactic for every block or each block's cheapest by cost (export's ``--no-tune`` choice), the
resampling by cost. onnxruntime's figure per kind is its nodes' kernel time per call; PyTorch's is
each aten operator's self time per call; onnxruntime's kinds are medians over the calls (its
"all" row a sum of medians), torch's means. Profiling adds a fixed cost to every node, so the
script prints the profiled calls' time beside the unprofiled median: where the two are close
(ms-scale nodes, as at L=1024 and batch 32) the kinds' times are the network's; on a small
network only their shares are.

    python -m benchmarks.export_profile --length 1024 --state max --tactic matmul --batch 32
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import profile

from benchmarks import harness
from benchmarks.export_speed import Options, batch_of, eager_ms, ort_ms, synthetic
from export.emit import to_onnx
from export.lowering import cheapest, lower, resample_tactics_by_cost, tactic_costs
from export.static import freeze, materialize
from export.tactics import TACTICS
from export.timing import session

BY_COST = "by-cost"
WARM_UP = 2  # onnxruntime's first two calls ran 1.5x slower (L=1024, batch 32): not counted


def ort_by_kind(graph, x: torch.Tensor, threads: int, calls: int
                ) -> tuple[dict[str, float], float]:
    """onnxruntime's profile of ``calls`` calls after :data:`WARM_UP` ones: :func:`kinds_per_call`
    of its events."""
    with tempfile.TemporaryDirectory() as tmp:
        sess = session(graph, threads, profile_prefix=os.path.join(tmp, "ort"))
        feeds = {graph.graph.input[0].name: x.numpy()}
        for _ in range(WARM_UP + calls):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    return kinds_per_call(events, WARM_UP)


def kinds_per_call(events: list[dict], warm_up: int) -> tuple[dict[str, float], float]:
    """From onnxruntime's profile events (times in microseconds): ms per call by ONNX op type,
    each the median over the calls after the first ``warm_up`` of its nodes' kernel time (0 in a
    call that ran none), and the median wall time of those calls (the profiler's cost included).
    A node belongs to the call whose span holds its start."""
    calls = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "model_run")
    calls = calls[warm_up:]
    per_call = [collections.Counter() for _ in calls]
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            for counter, (start, end) in zip(per_call, calls):
                if start <= e["ts"] <= end:
                    counter[e["args"]["op_name"]] += e["dur"] / 1e3
    kinds = {k: statistics.median(c[k] for c in per_call) for k in set().union(*per_call)}
    return kinds, statistics.median(end - start for start, end in calls) / 1e3


def torch_by_kind(module: torch.nn.Module, x: torch.Tensor, calls: int) -> dict[str, float]:
    """ms per call by aten operator, self time, from torch.profiler (the mean over the calls)."""
    with torch.no_grad():
        for _ in range(WARM_UP):  # outside the profile
            module(x)
        with profile() as prof:
            for _ in range(calls):
                module(x)
    return {e.key: e.self_cpu_time_total / 1e3 / calls for e in prof.key_averages()
            if e.key.startswith("aten::") and e.self_cpu_time_total > 0}


def table(kinds: dict[str, float], top: int) -> list[str]:
    total = sum(kinds.values())
    rows = sorted(kinds.items(), key=lambda kv: -kv[1])
    shown, rest = rows[:top], rows[top:]
    if rest:
        shown.append((f"({len(rest)} more kinds)", sum(v for _, v in rest)))
    lines = ["| kind | ms per call | share |", "|---|---|---|"]
    lines += [f"| {k} | {v:.3f} | {v / total:.1%} |" for k, v in shown]
    lines.append(f"| all | {total:.3f} | 100.0% |")
    return lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("--length", type=int, default=1024, help="the synthetic input's length L")
    p.add_argument("--state", choices=("found", "max"), default="max")
    p.add_argument("--tactic", choices=(BY_COST, *TACTICS), default=BY_COST,
                   help="every block's convolution tactic (by-cost: each block's cheapest)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="onnxruntime and torch threads")
    p.add_argument("--calls", type=int, default=10, help="profiled calls (and timed repeats)")
    p.add_argument("--top", type=int, default=12, help="kinds listed per table")
    args = p.parse_args(argv)
    harness.at_least_one(p, args, "length", "batch", "threads", "calls", "top")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    model, x = synthetic(Options(), args.length, args.state)
    static = materialize(model, freeze(model))
    n = len(static.blocks)
    tactics = cheapest(tactic_costs(static)) if args.tactic == BY_COST else [args.tactic] * n
    graph = to_onnx(lower(static, tactics, resample_tactics_by_cost(static)),
                    (batch_of(x, 2),))
    xb = batch_of(x, args.batch)
    (ort_wall,) = ort_ms([graph], [xb], args.threads, args.calls)
    (torch_wall,) = eager_ms([static], xb, args.calls)
    print("\n".join(harness.header(__file__, harness.arguments(argv), harness.ORT,
                                   machine_note=f"; {args.threads} thread(s)")))
    print(f"Network: synthetic {args.state}, L={args.length}, {n} blocks, tactics "
          f"{' '.join(tactics)}; batch {args.batch}")
    print(f"Wall time per call (median of {args.calls}): onnxruntime {ort_wall:.3f} ms, "
          f"static module in PyTorch {torch_wall:.3f} ms")
    kinds, profiled = ort_by_kind(graph, xb, args.threads, args.calls)
    print(f"\nonnxruntime, by op type (kernel time, median of {args.calls} calls; a profiled "
          f"call took {profiled:.3f} ms):\n")
    print("\n".join(table(kinds, args.top)))
    print(f"\nPyTorch static module, by aten operator (self time, mean of {args.calls} calls):\n")
    print("\n".join(table(torch_by_kind(static, xb, args.calls), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

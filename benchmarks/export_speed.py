"""Export speed: the exported network in onnxruntime against the trained model and the static
module in eager PyTorch, at a small and a large batch and 1 and 2 threads; the tactic mix against
single tactics; the stream carried as its spectrum (export.spectrum) against per-axis resampling;
the MatMul FFT forms against torch.fft; achieved GFLOP/s against a MatMul ceiling
measured in the same run; measured latency ratios against theory.

Networks:

- synthetic (weights random, BatchNorm calibrated on random data; latency does not depend on the
  values): a 1-D DNArch on length-L inputs (default L = 256, 1024 and 4096), base CCNN_{D,H}, in
  two mask states:
  - found: a state like the search ends in under its budget: 6 of the 8 blocks, narrower blocks,
    resolution 1/2 .. 1/16, kernels 3% .. 100% of the input (fixed below, documented in the
    output);
  - max:   every mask at its maximum: 2D blocks, 2H channels, global kernels, full resolution.
- real found networks: each ``--run-dir`` (a run directory written by ``python -m search.run``,
  e.g. a default search on ucr:ACSF1 or ucr:PLAID), calibrated on its training data.

Each is frozen, materialised, tactics tuned in onnxruntime at the batches of ``--batch`` (export
.policy.choose_lowering: per layer, then as whole networks, least worst slowdown over the
batches), lowered and exported with the dynamo exporter, exactly as ``python -m export.onnx``
does, once per thread count. Timings are medians of interleaved repeats (export.timing.measure),
onnxruntime and PyTorch eager with the same number of threads, measured separately (their
spinning thread pools would slow each other).

    python -m benchmarks.export_speed                   # writes benchmarks/results/export_speed.md
    python -m benchmarks.export_speed --run-dir runs/acsf1 --run-dir runs/plaid
    python -m benchmarks.export_speed --quick           # a fast sanity run (nothing written)

Targets (reported, not asserted):
1. onnxruntime >= 5x faster than the masked trained model in eager PyTorch, batch 1, every length;
2. onnxruntime at least as fast as the eager static module at the small and the large batch, every
   length, same threads;
3. measured latency ratio found/max within 1.25x of the theoretical cost ratio;
4. the tuned tactic mix never slower than the best single tactic for every layer;
5. the best FFT lowering in onnxruntime within 2x of torch.fft for the same convolution.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks import harness
from dnarch_deploy import DNArch, ModelConfig
from dnarch_deploy import masks as M
from dnarch_deploy.calibration import calibrate, task_batches
from dnarch_deploy.cli import add_fields
from dnarch_deploy.operators import conv_tactics
from dnarch_deploy.rundir import RunError, load_run
from dnarch_deploy.spectral import fft_conv
from export.bench import theoretical_costs
from export.emit import to_onnx
from export.lowering import lower
from export.pipeline import ExportOptions
from export.policy import choose_lowering
from export.static import StaticNet, freeze, materialize
from export.tactics import TACTICS, conv_macs, make_conv
from export.timing import achieved_gflops, matmul_ceiling, measure, runner, session

# the found state, per block: (n_in, n_mid, n_out) as fractions of 2H, resolution fraction,
# kernel extent as a fraction of the input
FOUND = [
    ((0.5, 0.75, 0.5), 1 / 2, 0.03),
    ((0.5, 0.5, 0.75), 1 / 4, 0.06),
    ((0.75, 0.5, 0.5), 1 / 4, 0.12),
    ((0.5, 0.75, 0.75), 1 / 8, 0.25),
    ((0.75, 0.5, 0.5), 1 / 8, 0.5),
    ((0.5, 0.5, 0.5), 1 / 16, 1.0),
]


@dataclass
class Options:
    lengths: str = "256,1024,4096"  # synthetic input lengths L, comma-separated ("": none)
    depth: int = 4  # D of the base CCNN_{D,H} (up to 2D blocks)
    width: int = 32  # H of the base CCNN_{D,H} (up to 2H channels)
    # the max network's tuning alone takes over 25 minutes at L = 4096 on 2 cores
    states: str = "found,max"  # synthetic mask states to benchmark, comma-separated
    threads: str = "1,2"  # onnxruntime intra-op threads = torch threads, comma-separated
    batch: str = "1,32"  # the batches tuned for and measured, comma-separated
    repeats: int = 20  # timed repetitions (medians)
    seed: int = 0
    run_dir: list[str] = None  # a trained run directory to benchmark (repeat the flag)
    singles: bool = True  # also time every single tactic for all blocks (batch 1, first threads)
    quick: bool = False  # L=256 (or the runs only), 1 thread, batches 1 and 4, 5 repetitions;
    # nothing written
    out: str = str(harness.results_file(__file__))  # where the report is written

    def ints(self, name: str) -> list[int]:
        return [int(v) for v in getattr(self, name).split(",") if v.strip()]


def set_found(model: DNArch) -> None:
    c = model.config
    H, D = c.max_width, c.max_depth
    with torch.no_grad():
        model.mask_depth.fill_(M.sigmoid_mu_for_size(len(FOUND), c.tau_depth, D, c.threshold))
        for b, (widths, res, kernel) in enumerate(FOUND):
            for i, w in enumerate(widths):
                model.mask_width[b, i] = M.sigmoid_mu_for_size(w * H, c.tau_width, H, c.threshold)
            model.mask_res[b, 0] = M.sigmoid_mu_for_size(res, c.tau_resolution, 1, c.threshold)
            model.mask_sigma[b, 0] = kernel * M.INSIDE / math.sqrt(-2 * math.log(c.threshold))
    model.clamp_masks_()


def set_max(model: DNArch) -> None:
    with torch.no_grad():
        for name in ("mask_depth", "mask_width", "mask_res", "mask_sigma"):
            getattr(model, name).fill_(1e3)  # clamped to the top of each range
    model.clamp_masks_()


def synthetic(opt: Options, length: int, state: str) -> tuple[DNArch, torch.Tensor]:
    torch.manual_seed(opt.seed)
    config = ModelConfig(in_channels=1, out_channels=10, input_size=(length,),
                         depth=opt.depth, width=opt.width, learn="KRWD")
    model = DNArch(config)
    (set_found if state == "found" else set_max)(model)
    batches = [torch.randn(16, 1, length) for _ in range(4)]
    return calibrate(model, batches, show_progress=False).eval(), torch.randn(1, 1, length)


def from_run(run_dir: str) -> tuple[str, DNArch, torch.Tensor]:
    """A trained run's model, BatchNorm calibrated on its training data as export does, and one
    test input."""
    run = load_run(run_dir)
    calibrate(run.model, task_batches(run.task.x_train, 64, 1024))
    x = torch.as_tensor(np.asarray(run.task.x_test[:1]))
    return str(run.config["task"]), run.model.eval(), x


def batch_of(x: torch.Tensor, batch: int) -> torch.Tensor:
    return x.repeat(batch, *[1] * (x.dim() - 1))[:batch].contiguous()


def ort_ms(graphs: list, xs: list[torch.Tensor], threads: int, repeats: int) -> list[float]:
    """onnxruntime medians of several graphs, each on its input, timed in turns (fair under
    load)."""
    fns = [runner(session(g, threads), {g.graph.input[0].name: x.numpy()})
           for g, x in zip(graphs, xs)]
    return [m["median_ms"] for m in measure(fns, repeats)]


def eager_ms(modules: list, x: torch.Tensor, repeats: int) -> list[float]:
    def run(module):
        def call():
            with torch.no_grad():
                module(x)

        return call

    return [m["median_ms"] for m in measure([run(m) for m in modules], repeats)]


def bench_network(opt: Options, label: str, state: str, model: DNArch, x: torch.Tensor,
                  threads: int, singles: bool) -> dict:
    """One network at one thread count: tuned export against eager PyTorch at every batch, the
    MatMul ceiling, and (``singles``) each single tactic for every block at batch 1."""
    batches = opt.ints("batch")
    torch.set_num_threads(threads)
    static: StaticNet = materialize(model, freeze(model))
    options = ExportOptions(batch=batches, threads=threads, repeats=opt.repeats, bench=False)
    tactics, resample, _, network = choose_lowering(static, options)
    lowered = lower(static, tactics, resample)
    row = {"network": label, "state": state, "length": int(x.shape[-1]), "threads": threads,
           "blocks": len(static.blocks), "stream": int(static.decoder.weight.shape[1]),
           "tactics": tactics, "resample": resample, "whole_network": network,
           "theoretical": sum(v["theoretical"] for v in theoretical_costs(lowered).values()),
           "paper": sum(v["paper"] for v in theoretical_costs(
               lowered, freeze(model).architecture).values())}
    graph = to_onnx(lowered, (batch_of(x, 2),))
    for b in batches:
        xb = batch_of(x, b)
        row[f"ort_{b}"] = ort_ms([graph], [xb], threads, opt.repeats)[0]
        row[f"trained_{b}"], row[f"static_{b}"] = eager_ms([model, static], xb, opt.repeats)
        row[f"gflops_{b}"] = achieved_gflops(row["theoretical"], b, row[f"ort_{b}"])
    row["ceiling"] = matmul_ceiling(threads, opt.repeats)["gflops"]
    if singles:  # one tactic for all blocks, where every block can have it in reasonable time
        cands = {"mix": tactics}
        for t in TACTICS:
            if [t] * len(tactics) != tactics and all(
                    t in conv_tactics(tuple(blk.bias1.shape[1:])) and
                    conv_macs(t, blk.n_in, tuple(blk.bias1.shape[1:]), blk.conv.taps,
                              blk.conv.period) < 2e9
                    for blk in lowered.blocks):
                cands[t] = [t] * len(tactics)
        graphs = [graph] + [to_onnx(lower(static, v, resample), (batch_of(x, 2),))
                            for k, v in cands.items() if k != "mix"]
        # the tuned tactics with every resampling one dense MatMul (the first lowering)
        dense = [{k: ["dense"] * len(v) for k, v in b.items()} for b in resample]
        if dense != resample:
            cands["dense_resample"] = tactics
            graphs.append(to_onnx(lower(static, tactics, dense), (batch_of(x, 2),)))
        for name, ms in zip(cands, ort_ms(graphs, [x] * len(graphs), threads, opt.repeats)):
            row[f"single_{name}"] = ms
    return row


def bench_convolutions(opt: Options, L: int, threads: int) -> list[dict]:
    """One depthwise convolution: the FFT lowerings in onnxruntime against torch.fft."""
    torch.set_num_threads(threads)
    cases = [(64, (L,), (L - 1,)), (32, (L,), (L // 4 + 1,)), (64, (L // 4,), (L // 4 - 1,)),
             (32, (28, 28), (27, 27))]
    rows = []
    for channels, size, taps in cases:
        kernel = torch.randn(channels, *taps) * 0.05
        x = torch.randn(1, channels, *size)
        row = {"channels": channels, "size": size, "taps": taps}
        names = [t for t in TACTICS if t in conv_tactics(size)
                 and (t != "direct" or conv_macs(t, channels, size, taps) < 3e8)]
        graphs = [to_onnx(make_conv(t, kernel, size).eval(), (x,)) for t in names]
        row.update(zip(names, ort_ms(graphs, [x] * len(graphs), threads, opt.repeats)))
        row["torch.fft"] = eager_ms([lambda t, k=kernel: fft_conv(t, k)], x, opt.repeats)[0]
        rows.append(row)
    return rows


def _ms(row: dict, key: str) -> str:
    return f"{row[key]:.3f}" if key in row else "-"


def network_table(opt: Options, nets: list[dict]) -> list[str]:
    """Each network against eager PyTorch at the small and the large batch."""
    batches = opt.ints("batch")
    small, large = batches[0], batches[-1]
    lines = [
        f"Synthetic networks: 1-D DNArch, base CCNN_{{{opt.depth},{opt.width}}}; weights random, "
        "BatchNorm calibrated. Latency in ms (median), theoretical in MMAC/sample (tactic-aware: "
        "export.bench.theoretical_costs), paper = the search's cost model. Tactics tuned for "
        f"batches {', '.join(map(str, batches))} (least worst slowdown). "
        "trained = the masked trained model, static = the static module, both eager PyTorch; "
        "x = how many times faster onnxruntime is.",
        "",
        f"| network | L | threads | blocks | tactics (tuned) | stream | theoretical MMAC | "
        f"search cost MMAC | "
        f"ORT B={small} | trained B={small} | static B={small} | ORT B={large} | "
        f"trained B={large} | static B={large} | GFLOP/s B={small} / B={large} / MatMul "
        f"ceiling |",
        "| " + " | ".join(["---"] * 15) + " |",
    ]
    for r in nets:
        cells = [f"{r['network']} ({r['state']})" if r["state"] else r["network"], str(r["length"]),
                 str(r["threads"]), str(r["blocks"]), " ".join(r["tactics"]),
                 r["whole_network"]["stream"]["kept"],
                 f"{r['theoretical'] / 1e6:.2f}", f"{r['paper'] / 1e6:.2f}"]
        for b in (small, large):
            ort = r[f"ort_{b}"]
            cells += [f"{ort:.3f}", f"{r[f'trained_{b}']:.3f} ({r[f'trained_{b}'] / ort:.1f}x)",
                      f"{r[f'static_{b}']:.3f} ({r[f'static_{b}'] / ort:.2f}x)"]
        cells.append(f"{r[f'gflops_{small}']:.2f} / {r[f'gflops_{large}']:.2f} / "
                     f"{r['ceiling']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def mix_table(nets: list[dict], small: int) -> tuple[list[str], list[float]]:
    """The tactic mix against single tactics (the networks timed with ``singles``), and per
    network mix / best single."""
    single_rows = [r for r in nets if "single_mix" in r]
    if not single_rows:
        return [], []
    lines = ["", f"Tactic mix against one tactic everywhere, and against the mix with every "
             f"resampling one dense MatMul (onnxruntime ms, batch {small}; '-': that tactic "
             "is the mix, or too slow to time; resampling all dense: the same lowering):", "",
             "| network | L | threads | mix | " + " | ".join(TACTICS)
             + " | mix, resampling all dense | mix / best single |",
             "| " + " | ".join(["---"] * (6 + len(TACTICS))) + " |"]
    ratios = []
    for r in single_rows:
        timed = {t: r[f"single_{t}"] for t in TACTICS if f"single_{t}" in r}
        ratio = r["single_mix"] / min(timed.values()) if timed else 1.0
        ratios.append(ratio)
        lines.append(f"| {r['network']} ({r['state']}) | {r['length']} | {r['threads']} | "
                     f"{r['single_mix']:.3f} | "
                     + " | ".join(_ms(r, f"single_{t}") for t in TACTICS)
                     + f" | {_ms(r, 'single_dense_resample')} | {ratio:.3f} |")
    return lines, ratios


def whole_network_lines(nets: list[dict]) -> list[str]:
    lines = ["", "Whole-network tuning (export.policy.fastest_network, then fastest_stream; "
             "ms per batch):", ""]
    for r in nets:
        wn = r["whole_network"]
        timed = "; ".join(
            f"{c['name']} (" + ", ".join(f"B={b} {ms:.3f}" for b, ms in c["ms_by_batch"].items())
            + ")"
            for c in wn["candidates"] if "ms_by_batch" in c)
        lines.append(f"- {r['network']} {r['state']} L={r['length']} {r['threads']} thread(s): "
                     f"{timed or 'nothing timed'}; kept {wn['kept']}; stream: "
                     f"{wn['stream']['why']}, kept {wn['stream']['kept']}")
    return lines


def conv_table(convs: list[dict]) -> tuple[list[str], list[float]]:
    """One depthwise convolution's lowerings against torch.fft, and per case best FFT / torch."""
    if not convs:
        return [], []
    lines = ["", f"One depthwise convolution, batch 1, {convs[0]['threads']} thread(s): "
             "lowerings in onnxruntime against torch.fft (dnarch_deploy.spectral.fft_conv) "
             "in eager PyTorch (ms; '-': direct not timed, too many MACs, or dense not "
             "offered at that size):", "",
             "| channels | size | taps | " + " | ".join(TACTICS)
             + " | torch.fft | best FFT / torch |",
             "| " + " | ".join(["---"] * (5 + len(TACTICS))) + " |"]
    ratios = []
    for r in convs:
        best = min(r[t] for t in TACTICS if t not in ("direct", "dense") and t in r)
        ratios.append(best / r["torch.fft"])
        lines.append(f"| {r['channels']} | {r['size']} | {r['taps']} | "
                     + " | ".join(_ms(r, t) for t in TACTICS)
                     + f" | {r['torch.fft']:.3f} | {ratios[-1]:.2f} |")
    return lines, ratios


VERDICT = {True: "met", False: "NOT met"}


def network_targets(nets: list[dict], small: int, large: int) -> list[str]:
    """Targets 1-3 for every network: found, max and the runs'."""
    lines = []
    for r in nets:
        name = (f"{r['network']}{' ' + r['state'] if r['state'] else ''} L={r['length']}, "
                f"{r['threads']} thread(s)")
        speedup = r[f"trained_{small}"] / r[f"ort_{small}"]
        vs_static = [r[f"static_{b}"] / r[f"ort_{b}"] for b in (small, large)]
        lines += [
            f"| {name}: onnxruntime >= 5x faster than the masked trained model, B={small} | "
            f"{speedup:.1f}x | {VERDICT[speedup >= 5]} |",
            f"| {name}: onnxruntime at least as fast as the eager static module, B={small} and "
            f"B={large} | {vs_static[0]:.2f}x, {vs_static[1]:.2f}x | "
            f"{VERDICT[min(vs_static) >= 1]} |",
        ]
        big = next((m for m in nets if m["state"] == "max" and r["state"] == "found"
                    and m["length"] == r["length"] and m["threads"] == r["threads"]
                    and m["network"] == r["network"]), None)
        if big is not None:
            theory = r["theoretical"] / big["theoretical"]
            measured = r[f"ort_{small}"] / big[f"ort_{small}"]
            apart = max(measured / theory, theory / measured)
            lines.append(f"| {name}: measured ratio found/max within 1.25x of the theoretical "
                         f"ratio, B={small} | measured {measured:.3f}, theoretical {theory:.3f}: "
                         f"{apart:.2f}x apart | {VERDICT[apart <= 1.25]} |")
    return lines


def targets_table(nets: list[dict], small: int, large: int, mix_ratios: list[float],
                  fft_ratios: list[float]) -> list[str]:
    lines = ["", "Targets:", "", "| target | figure | status |", "| --- | --- | --- |",
             *network_targets(nets, small, large)]
    if mix_ratios:
        lines.append(f"| tactic mix never slower than the best single tactic | mix / best single:"
                     f" {', '.join(f'{v:.3f}' for v in mix_ratios)} | "
                     f"{VERDICT[max(mix_ratios) <= 1.0]} |")
    if fft_ratios:
        lines.append(f"| best FFT lowering within 2x of torch.fft | "
                     f"{', '.join(f'{v:.2f}' for v in fft_ratios)} | "
                     f"{VERDICT[all(v <= 2 for v in fft_ratios)]} |")
    return lines


def report(opt: Options, nets: list[dict], convs: list[dict], load: tuple[float, float],
           argv: list[str]) -> str:
    batches = opt.ints("batch")
    small, large = batches[0], batches[-1]
    mix, mix_ratios = mix_table(nets, small)
    convolutions, fft_ratios = conv_table(convs)
    head = harness.header(
        __file__, argv, harness.ORT,
        command_note=f" ({', '.join(f'{k}={v}' for k, v in dataclasses.asdict(opt).items())})",
        machine_note=f"; load average {load[0]:.1f} before, {load[1]:.1f} after (a shared "
        "machine: other jobs ran beside this one; compare ratios within a row)",
        versions_note=". Threads: the same number for onnxruntime and torch")
    lines = ["# Export speed", "", *head, "", *network_table(opt, nets), *mix,
             *whole_network_lines(nets), *convolutions,
             *targets_table(nets, small, large, mix_ratios, fft_ratios),
             "", "Found state per block ((n_in, n_mid, n_out) / 2H, resolution, kernel / L): "
             + "; ".join(f"{w}, {r:.3g}, {k}" for w, r, k in FOUND) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = harness.arguments(argv)
    p = harness.parser(__doc__)
    add_fields(p, Options)
    opt = Options(**vars(p.parse_args(argv)))
    opt.run_dir = opt.run_dir or []
    unknown = set(opt.states.split(",")) - {"found", "max"}
    if unknown:
        p.error(f"--states takes found and/or max, got {', '.join(sorted(unknown))}")
    if not opt.quick:  # before any work, not after it
        harness.check_report(p, opt.out, make_folder=False)
    if opt.quick:  # with run directories: those alone
        opt.lengths = "" if opt.run_dir else "256"
        opt.threads, opt.batch, opt.repeats = "1", "1,4", 5
    try:  # every run loaded (and calibrated) once, before any timing
        runs = [from_run(run_dir) for run_dir in opt.run_dir]
    except RunError as e:
        p.error(str(e))
    before = os.getloadavg()[0]
    nets = []
    for threads in opt.ints("threads"):
        singles = opt.singles and threads == opt.ints("threads")[0]
        for label, model, x in runs:
            nets.append(bench_network(opt, label, "", model, x, threads, singles))
        for length in opt.ints("lengths"):
            for state in opt.states.split(","):
                model, x = synthetic(opt, length, state)
                nets.append(bench_network(opt, "synthetic", state, model, x, threads, singles))
    lengths = opt.ints("lengths") or [256]
    convs = bench_convolutions(opt, max(lengths), opt.ints("threads")[0])
    for r in convs:
        r["threads"] = opt.ints("threads")[0]
    text = report(opt, nets, convs, (before, os.getloadavg()[0]), argv)
    harness.publish(text, None if opt.quick else opt.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Export speed: the exported network in onnxruntime against the trained model, the tactic mix
against single tactics, the MatMul FFT against torch.fft, measured latency against theory.

Networks (weights random, BatchNorm calibrated on random data; latency does not depend on the
values): a 1-D DNArch on length-L inputs (L = 256 and 1024), base CCNN_{D,H}, in two mask states:

- found: a state like the search ends in under its budget: 6 of the 8 blocks, narrower blocks,
  resolution 1/2 .. 1/16, kernels 3% .. 100% of the input (fixed below, documented in the output);
- max:   every mask at its maximum: 2D blocks, 2H channels, global kernels, full resolution.

Each is frozen, materialised, tactics tuned in onnxruntime (export.tune: per layer, then the
per-layer choice against each single tactic as whole networks), lowered and exported with the
dynamo exporter, exactly as ``python -m export.onnx`` does. Timings are medians of
interleaved repeats (export.timing.measure), onnxruntime and PyTorch eager with the same number
of threads, measured separately (their spinning thread pools would slow each other).

    python benchmarks/export_speed.py           # writes benchmarks/results/export_speed.md
    python benchmarks/export_speed.py --quick   # a fast sanity run (nothing written)

Targets (reported, not asserted):
1. onnxruntime >= 5x faster than the masked trained model in eager PyTorch, batch 1;
2. measured latency ratio found/max within 1.25x of the theoretical cost ratio;
3. the per-layer tactic mix is never slower than the best single tactic for every layer;
4. the best FFT lowering in onnxruntime within 2x of torch.fft for the same convolution.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import onnxruntime
import torch

from dnarch_deploy import DNArch, ModelConfig
from dnarch_deploy import masks as M
from dnarch_deploy.spectral import fft_conv
from export.bench import theoretical_costs
from export.calibration import calibrate
from export.emit import to_onnx
from export.lowering import lower
from export.policy import fastest, fastest_network, resample_choice
from export.static import freeze, materialize
from export.tactics import TACTICS, make_conv
from export.timing import measure, runner, session
from export.tune import measure_resample, measure_tactics

RESULTS = Path(__file__).parent / "results" / "export_speed.md"
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
    lengths: str = "256,1024"  # input lengths L, comma-separated (convolutions: the largest)
    depth: int = 4  # D of the base CCNN_{D,H} (up to 2D blocks)
    width: int = 32  # H of the base CCNN_{D,H} (up to 2H channels)
    threads: int = 1  # onnxruntime intra-op threads = torch threads (1: robust on a shared CPU)
    batch: int = 16  # the larger batch measured besides batch 1
    repeats: int = 30  # timed repetitions (medians)
    seed: int = 0
    quick: bool = False  # L=128, 8 repetitions; nothing written


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


def network(opt: Options, length: int, state: str) -> DNArch:
    torch.manual_seed(opt.seed)
    config = ModelConfig(in_channels=1, out_channels=10, input_size=(length,),
                         depth=opt.depth, width=opt.width, learn="KRWD")
    model = DNArch(config)
    (set_found if state == "found" else set_max)(model)
    batches = [torch.randn(16, 1, length) for _ in range(4)]
    return calibrate(model, batches, show_progress=False).eval()


def ort_ms(graphs: list, x: torch.Tensor, opt: Options) -> list[float]:
    """onnxruntime medians of several graphs on one input, timed in turns (fair under load)."""
    fns = [runner(session(g, opt.threads), {"x": x.numpy()}) for g in graphs]
    return [m["median_ms"] for m in measure(fns, opt.repeats)]


def eager_ms(modules: list, x: torch.Tensor, opt: Options) -> list[float]:
    def run(module):
        def call():
            with torch.no_grad():
                module(x)

        return call

    return [m["median_ms"] for m in measure([run(m) for m in modules], opt.repeats)]


def bench_networks(opt: Options, length: int) -> list[dict]:
    """Found and max networks: tuned export and every single-tactic export, all timed together."""
    rows, graphs, models = [], {}, []
    x1, xb = torch.randn(1, 1, length), torch.randn(opt.batch, 1, length)
    for state in ("found", "max"):
        model = network(opt, length, state)
        static = materialize(model, freeze(model))
        resample = resample_choice(measure_resample(static, 1, opt.threads, opt.repeats))
        dense = [{k: ["dense"] * len(v) for k, v in b.items()} for b in resample]
        per_layer = fastest(measure_tactics(static, 1, opt.threads, opt.repeats))
        tuned, whole = fastest_network(static, per_layer, resample, TACTICS, 1, opt.threads,
                                       opt.repeats)
        variants = {"mix": tuned, **{t: [t] * len(static.blocks) for t in TACTICS}}
        row = {"state": state, "length": length, "blocks": len(static.blocks), "tactics": tuned,
               "stream": int(static.decoder.weight.shape[1]), "resample": resample,
               "whole_network": whole}
        # the tuned network with every resampling as one dense MatMul (the previous lowering)
        lowered_dense = lower(static, tuned, dense)
        row["theoretical_dense"] = sum(
            v["theoretical"] for v in theoretical_costs(lowered_dense).values())
        graphs[(state, "mix_dense")] = to_onnx(lowered_dense, (x1,))
        for name, tactics in variants.items():
            lowered = lower(static, tactics, resample)
            if name == "mix":
                costs = theoretical_costs(lowered).values()
                row["theoretical"] = sum(v["theoretical"] for v in costs)
                same = [k for k in TACTICS if variants[k] == tactics]
                if same:  # one tactic everywhere: the very same graph as that single tactic
                    row["mix_is"] = same[0]
                    continue
            graphs[(state, name)] = to_onnx(lowered, (x1,))
        rows.append(row)
        models.append(model)
    keys = list(graphs)
    for key, ms in zip(keys, ort_ms([graphs[k] for k in keys], x1, opt)):
        next(r for r in rows if r["state"] == key[0])[f"ort_{key[1]}"] = ms
    for row in rows:
        if "mix_is" in row:
            row["ort_mix"] = row[f"ort_{row['mix_is']}"]
    mix_graphs = [graphs[(r["state"], r.get("mix_is", "mix"))] for r in rows]
    for row, ms in zip(rows, ort_ms(mix_graphs, xb, opt)):
        row["ort_mix_batch"] = ms
    for row, ms in zip(rows, eager_ms(models, x1, opt)):
        row["eager_trained"] = ms
    for row, ms in zip(rows, eager_ms(models, xb, opt)):
        row["eager_trained_batch"] = ms
    return rows


def bench_convolutions(opt: Options, L: int) -> list[dict]:
    """One depthwise convolution: the FFT lowerings in onnxruntime against torch.fft."""
    cases = [(64, (L,), (L - 1,)), (32, (L,), (L // 4 + 1,)), (64, (L // 4,), (L // 4 - 1,)),
             (32, (28, 28), (27, 27))]
    rows = []
    for channels, size, taps in cases:
        kernel = torch.randn(channels, *taps) * 0.05
        x = torch.randn(1, channels, *size)
        row = {"channels": channels, "size": size, "taps": taps}
        graphs = [to_onnx(make_conv(t, kernel, size).eval(), (x,)) for t in TACTICS]
        row.update(zip(TACTICS, ort_ms(graphs, x, opt)))
        row["torch.fft"] = eager_ms([lambda t, k=kernel: fft_conv(t, k)], x, opt)[0]
        rows.append(row)
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def report(opt: Options, nets: list[dict], convs: list[dict], load: tuple[float, float]) -> str:
    lengths = sorted({r["length"] for r in nets})
    lines = [
        "# Export speed",
        "",
        f"Command: `python benchmarks/export_speed.py{' --quick' if opt.quick else ''}` "
        f"({', '.join(f'{k}={v}' for k, v in dataclasses.asdict(opt).items())})",
        f"Machine: {machine()}; load average {load[0]:.1f} before, {load[1]:.1f} after "
        f"(a shared machine: other jobs ran beside this one).",
        f"Versions: Python {platform.python_version()}, torch {torch.__version__}, onnxruntime "
        f"{onnxruntime.__version__}. {opt.threads} thread(s) for onnxruntime and torch.",
        "",
        f"Networks: 1-D DNArch, base CCNN_{{{opt.depth},{opt.width}}}; weights random, BatchNorm "
        "calibrated. Latency in ms (median), theoretical in MMAC/sample (tactic-aware: "
        "export.bench.theoretical_costs).",
        "",
        f"| L | network | blocks | stream | tactics (tuned) | theoretical MMAC | ORT ms B=1 | ORT "
        f"ms B={opt.batch} | eager trained ms B=1 | eager trained ms B={opt.batch} | speedup B=1 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in nets:
        lines.append(
            f"| {r['length']} | {r['state']} | {r['blocks']} | {r['stream']} | "
            f"{' '.join(r['tactics'])} | {r['theoretical'] / 1e6:.2f} | {r['ort_mix']:.3f} | "
            f"{r['ort_mix_batch']:.3f} | {r['eager_trained']:.3f} | "
            f"{r['eager_trained_batch']:.3f} | {r['eager_trained'] / r['ort_mix']:.1f}x |"
        )
    lines += ["", "Spectral resampling per block (tuned: D = one dense MatMul, F = factored "
              "four-step MatMul FFT; down / up), against the same network with every "
              "resampling dense (the previous lowering), onnxruntime ms, batch 1:", "",
              "| L | network | resampling (tuned) | theoretical MMAC | ORT ms B=1 | theoretical "
              "MMAC, all dense | ORT ms B=1, all dense | all dense / tuned |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in nets:
        tags = " ".join(
            "/".join("".join(t[0].upper() for t in b[k]) or "-" for k in ("down", "up"))
            for b in r["resample"])
        lines.append(f"| {r['length']} | {r['state']} | {tags} | {r['theoretical'] / 1e6:.2f} | "
                     f"{r['ort_mix']:.3f} | {r['theoretical_dense'] / 1e6:.2f} | "
                     f"{r['ort_mix_dense']:.3f} | {r['ort_mix_dense'] / r['ort_mix']:.2f} |")
    lines += ["", "Tactic mix against one tactic everywhere (onnxruntime ms, batch 1):", "",
              "| L | network | mix | direct | matmul | dft | best single | mix / best single |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    mix_ratios = []
    for r in nets:
        best = min(TACTICS, key=lambda k: r[f"ort_{k}"])
        mix_ratios.append(r["ort_mix"] / r[f"ort_{best}"])
        mix = f"{r['ort_mix']:.3f}" + (f" (= {r['mix_is']})" if "mix_is" in r else "")
        lines.append(f"| {r['length']} | {r['state']} | {mix} | {r['ort_direct']:.3f} | "
                     f"{r['ort_matmul']:.3f} | {r['ort_dft']:.3f} | {best} | "
                     f"{mix_ratios[-1]:.3f} |")
    lines += ["", "Whole-network tuning (export.policy.fastest_network: the per-layer choice "
              "against each single tactic for every block, timed as whole networks during "
              "tuning; ms, batch 1):", ""]
    for r in nets:
        cands = r["whole_network"]["candidates"]
        timed = ", ".join(f"{c['name']} {c['median_ms']:.3f}" for c in cands if "median_ms" in c)
        lines.append(f"- L={r['length']} {r['state']}: per-layer choice "
                     f"{' '.join(cands[0]['tactics'])}; {timed or 'nothing timed'}; "
                     f"kept {r['whole_network']['kept']}")
    lines += ["", "One depthwise convolution, batch 1: FFT lowerings in onnxruntime against "
              "torch.fft (dnarch_deploy.spectral.fft_conv) in eager PyTorch (ms):", "",
              "| channels | size | taps | direct | matmul | dft | torch.fft | best FFT / torch |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    fft_ratios = []
    for r in convs:
        best = min(r["matmul"], r["dft"])
        fft_ratios.append(best / r["torch.fft"])
        lines.append(f"| {r['channels']} | {r['size']} | {r['taps']} | {r['direct']:.3f} | "
                     f"{r['matmul']:.3f} | {r['dft']:.3f} | {r['torch.fft']:.3f} | "
                     f"{fft_ratios[-1]:.2f} |")
    verdict = {True: "met", False: "NOT met"}
    lines += ["", "Targets:", "", "| target | figure | status |", "| --- | --- | --- |"]
    for length in lengths:
        found, big = (next(r for r in nets if r["length"] == length and r["state"] == s)
                      for s in ("found", "max"))
        speedup = found["eager_trained"] / found["ort_mix"]
        theory = found["theoretical"] / big["theoretical"]
        measured = found["ort_mix"] / big["ort_mix"]
        apart = max(measured / theory, theory / measured)
        lines += [
            f"| L={length}: onnxruntime >= 5x faster than the masked trained model (eager), "
            f"batch 1, found network | {speedup:.1f}x | {verdict[speedup >= 5]} |",
            f"| L={length}: measured ratio found/max within 1.25x of the theoretical ratio | "
            f"measured {measured:.3f}, theoretical {theory:.3f}: {apart:.2f}x apart | "
            f"{verdict[apart <= 1.25]} |",
        ]
    lines += [
        f"| tactic mix never slower than the best single tactic | mix / best single: "
        f"{', '.join(f'{v:.3f}' for v in mix_ratios)} | {verdict[max(mix_ratios) <= 1.0]} |",
        f"| best FFT lowering within 2x of torch.fft | "
        f"{', '.join(f'{v:.2f}' for v in fft_ratios)} | "
        f"{verdict[all(v <= 2 for v in fft_ratios)]} |",
        "",
        "Found state per block ((n_in, n_mid, n_out) / 2H, resolution, kernel / L): "
        + "; ".join(f"{w}, {r:.3g}, {k}" for w, r, k in FOUND) + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Options):
        if f.type in ("bool", bool):
            p.add_argument(f"--{f.name}", action="store_true")
        else:
            p.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    opt = Options(**vars(p.parse_args(argv)))
    if opt.quick:
        opt.lengths, opt.repeats = "128", 8
    torch.set_num_threads(opt.threads)
    before = os.getloadavg()[0]
    lengths = [int(v) for v in opt.lengths.split(",")]
    nets = [row for length in lengths for row in bench_networks(opt, length)]
    convs = bench_convolutions(opt, max(lengths))
    text = report(opt, nets, convs, (before, os.getloadavg()[0]))
    print(text)
    if not opt.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

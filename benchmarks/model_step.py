"""Training-step time of DNArch (learn=KRWD) against the base CCNN (learn=none), CPU and CUDA.

One step = forward, task loss (+ lambda * L_comp for DNArch: its cost model is part of its step),
backward. The optimiser update is left out: it is the same for every variant and would move the
masks away from the architecture being timed. Every variant of a setting is timed in one run,
several independent copies of each (same weights: two copies of one network differed by up to 8 %
in one process), with interleaved repetitions (base, init, half, ..., base, init, ...), median
over every copy's repetitions:

- base:   the fixed CCNN_{D,H} (global kernels, full resolution, no masks);
- init:   DNArch with its masks at initialisation: the base's widths, kernels and resolution
          (it may cost more than the base: with R learned, a full-resolution block's spectrum
          mask makes its deployed kernel a circular filter of 2S - 1 taps, run at the
          training's FFT length; 1.01x at L=784, 1.13-1.15x at 28x28);
- half:   DNArch with the kernel, resolution and width masks shrunk by one common factor until
          model_cost / base_cost ~ 0.5 (depth kept), the achieved ratio printed;
- half-R, half-W: the same cost ratio reached with one mask kind only (diagnostics: which savings
          of the cost model turn into time).

    python -m benchmarks.model_step            # writes benchmarks/results/model_step.md
    python -m benchmarks.model_step --quick    # a fast sanity run (nothing written)

Targets (reported, not asserted): init step <= 1.05x base (the budget issue: the search may not
slow the training step by more than 5 % at the base size); half-cost step <= 0.7x base.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from tqdm import tqdm

from benchmarks import harness
from dnarch_deploy import DNArch, ModelConfig, base_cost, complexity_loss, model_cost
from dnarch_deploy import masks as M
from dnarch_deploy.cli import add_fields
from search.train import flush_denormals, keep_freed_memory

TARGETS = {"init": 1.05, "half": 0.7}
SHAPES = {  # name: (input_size, in_channels, classes)
    "1-D L=784": ((784,), 1, 10),  # sequential MNIST
    "2-D 28x28": ((28, 28), 1, 10),  # MNIST
}
VARIANTS = {"base": None, "init": "", "half": "KRW", "half-R": "R", "half-W": "W"}


@dataclass
class Options:
    batch: int = 32  # samples per step
    widths: str = "32,64"  # H of the base CCNN_{D,H}, comma-separated: one setting each
    depth: int = 4  # D of the base CCNN_{D,H}
    reps: int = 15  # timed repetitions per instance of a variant
    # independent copies of each variant (same weights): two copies of one network, stepped in
    # turns, differed by up to 8 % in one process (memory placement), more than the 5 % target
    instances: int = 5
    warmup: int = 3  # untimed steps per variant first
    lam: float = 1.0  # weight of L_comp in the DNArch step
    target: float = 0.5  # cost ratio of the shrunk variants
    threads: int = 0  # torch.set_num_threads; 0 keeps torch's default
    devices: str = "auto"  # "cpu", "cuda", or "auto": cpu, plus cuda when available
    seed: int = 0
    quick: bool = False  # 1-D only, H=32, small batch, 3 repetitions; nothing written
    out: str = str(harness.results_file(__file__))  # the markdown table (not with --quick)


def set_scale(model: DNArch, s: float, kinds: str) -> None:
    """Shrink the masks of the given kinds (K, R, W) to the fraction s of the base size, in
    size() terms; the others stay at initialisation."""
    c = model.config
    with torch.no_grad():
        if "W" in kinds:
            model.mask_width.fill_(M.sigmoid_mu_for_size(s * c.width, c.tau_width, c.max_width))
        if "R" in kinds:
            model.mask_res.fill_(M.sigmoid_mu_for_size(s, c.tau_resolution, 1))
        if "K" in kinds:
            model.mask_sigma.fill_(s * M.sigma_for_full_kernel(c.threshold))
        model.clamp_masks_()


def cost_ratio(model: DNArch) -> float:
    with torch.no_grad():
        return float(model_cost(model)["total"]) / base_cost(model.config)


def shrink_to(model: DNArch, target: float, kinds: str) -> float:
    """Bisect the common factor s so that model_cost / base_cost ~ target; returns the ratio."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        set_scale(model, mid, kinds)
        lo, hi = (mid, hi) if cost_ratio(model) < target else (lo, mid)
    set_scale(model, hi, kinds)
    return cost_ratio(model)


def make_step(model: DNArch, x: torch.Tensor, y: torch.Tensor, lam: float):
    target = base_cost(model.config)
    learns = model.config.learn != "none"

    def step() -> None:  # as search.train steps: one plan serves the network and its cost
        model.zero_grad(set_to_none=True)
        plan = model.plan()
        loss = F.cross_entropy(model.run(x, plan), y)
        if learns:
            loss = loss + lam * complexity_loss(model_cost(model, plan)["total"], target)
        loss.backward()

    return step


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def ops_per_step(step) -> int:
    """ATen operators one step dispatches, forward and backward. Beside its arithmetic each costs
    a few microseconds of dispatch and autograd bookkeeping, which on a CPU step of small tensors
    (the masks, the cost model) adds up where the arithmetic does not."""
    with _CountOps() as counter:
        step()
    return counter.count


def timed(step, device: torch.device) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0, c0 = time.perf_counter(), time.process_time()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0, time.process_time() - c0


def materialised(model: DNArch) -> str:
    """What block 0 computes, and how many blocks run."""
    with torch.no_grad():
        plan = model.plan()
    b = plan.blocks[0]
    taps = "x".join(str(2 * h + 1) for h in b.half_taps)
    return (
        f"{len(plan.blocks)} blocks, stream {plan.stream}, block 0: n {b.n_in}/{b.n_mid}/{b.n_out}"
        f", R {'x'.join(map(str, b.resolution))}, {taps} taps"
    )


def bench_setting(shape: str, width: int, device: torch.device, opt: Options, bar) -> list[dict]:
    size, c_in, classes = SHAPES[shape]
    common = dict(in_channels=c_in, out_channels=classes, input_size=size, depth=opt.depth)
    models, ratios = {}, {}
    for name, kinds in VARIANTS.items():
        learn = "none" if kinds is None else "KRWD"
        torch.manual_seed(opt.seed)  # same weights for every DNArch variant
        model = DNArch(ModelConfig(**common, width=width, learn=learn))
        ratios[name] = shrink_to(model, opt.target, kinds) if kinds else cost_ratio(model)
        # copies of their own memory, the same weights and masks
        models[name] = [model] + [copy.deepcopy(model) for _ in range(opt.instances - 1)]
    g = torch.Generator().manual_seed(opt.seed)
    x = torch.randn(opt.batch, c_in, *size, generator=g).to(device)
    y = torch.randint(0, classes, (opt.batch,), generator=g).to(device)
    steps = {}
    for name, copies in models.items():
        steps[name] = []
        for model in copies:
            model.to(device).train()
            steps[name].append(make_step(model, x, y, opt.lam))
            for _ in range(opt.warmup):
                steps[name][-1]()
    # per variant, per copy: (wall, cpu) seconds of each repetition
    times = {name: [[] for _ in copies] for name, copies in steps.items()}
    for _ in range(opt.reps):
        for i in range(opt.instances):  # interleaved: load drifts hit every variant alike
            for name, copies in steps.items():
                times[name][i].append(timed(copies[i], device))
        bar.update(1)

    def median(name: str, which: int, copy: int | None = None) -> float:
        runs = times[name] if copy is None else [times[name][copy]]
        return statistics.median(t[which] for run in runs for t in run)

    base_wall, base_cpu = median("base", 0), median("base", 1)
    rows = []
    for name, copies in models.items():
        per_copy = [median(name, 0, i) / base_wall for i in range(opt.instances)]
        rows.append(
            dict(
                setting=f"{shape}, H={width}",
                device=device.type,
                variant=name,
                ratio=ratios[name],
                ms=1e3 * median(name, 0),
                time_ratio=median(name, 0) / base_wall,
                copies=(min(per_copy), max(per_copy)),
                cpu_ratio=median(name, 1) / base_cpu,
                ops=ops_per_step(steps[name][0]),
                plan=materialised(copies[0]),
            )
        )
    return rows


def host(argv: list[str]) -> list[str]:
    """The report's header, taken before the run: the load average is that of the other jobs."""
    cuda = f"; CUDA: {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return harness.header(
        __file__, argv, machine_note=f", torch.get_num_threads()={torch.get_num_threads()}, load "
        f"average {os.getloadavg()[0]:.1f} at the start{cuda}")


def table(rows: list[dict], opt: Options, head: list[str]) -> str:
    lines = [
        "# DNArch training step vs the base CCNN",
        "",
        *head,
        "",
        f"Step = forward + cross-entropy (+ {opt.lam} x L_comp for DNArch) + "
        f"backward, batch {opt.batch}, D={opt.depth}; {opt.instances} independent copies of "
        f"each network (same weights), {opt.reps} repetitions of each, all interleaved, after "
        f"{opt.warmup} warm-up steps each; `step ms` and `step / base` are medians over every "
        f"copy's repetitions, `copies` the range of each copy's own median over the base's "
        f"(two copies of one network differ by several % in one process). `init`: masks at "
        f"initialisation (the base's widths, kernels and resolution); `half`: kernel, "
        f"resolution and width masks shrunk together to half the cost; `half-R`, "
        f"`half-W`: half the cost from one mask kind only. Targets are checked on wall-clock "
        f"time; `CPU / base` is the same ratio in CPU time of the process (less sensitive to "
        f"other jobs on a shared machine; with several threads it also counts their waiting). "
        f"`ops / step`: ATen operators one step dispatches, forward and backward (counted with a "
        f"TorchDispatchMode; each costs dispatch and autograd time beside its arithmetic).",
        "",
        "| setting | device | variant | cost / base | step ms | step / base | copies | CPU / base "
        "| ops / step | target | materialised |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = TARGETS.get(r["variant"])
        met = "" if target is None else ("met" if r["time_ratio"] <= target else "**missed**")
        goal = "" if target is None else f"<= {target}: {met}"
        lines.append(
            f"| {r['setting']} | {r['device']} | {r['variant']} | {r['ratio']:.3f} | "
            f"{r['ms']:.1f} | {r['time_ratio']:.2f} | {r['copies'][0]:.2f}-{r['copies'][1]:.2f} | "
            f"{r['cpu_ratio']:.2f} | {r['ops']} | {goal} "
            f"| {r['plan']} |"
        )
    return "\n".join(lines) + "\n"


def parse(argv=None) -> Options:
    parser = harness.parser(__doc__)
    add_fields(parser, Options)
    opt = Options(**vars(parser.parse_args(argv)))
    widths = opt.widths.split(",")
    if not all(w.isdigit() and int(w) > 0 for w in widths):
        parser.error(f"--widths: positive integers separated by commas, not {opt.widths!r}")
    if opt.instances < 1 or opt.reps < 1:
        parser.error("--instances and --reps: at least 1")
    if opt.quick:
        opt.reps, opt.warmup, opt.batch, opt.widths = min(opt.reps, 3), 1, min(opt.batch, 8), "32"
        opt.instances = min(opt.instances, 2)
    return opt


def main(argv=None) -> None:
    opt = parse(argv)
    flush_denormals()  # as search.run trains
    keep_freed_memory()
    if opt.threads:
        torch.set_num_threads(opt.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = devices if opt.devices == "auto" else [opt.devices]
    shapes = list(SHAPES)[:1] if opt.quick else list(SHAPES)
    widths = [int(w) for w in opt.widths.split(",")]
    settings = [(d, s, w) for d in devices for s in shapes for w in widths]
    head = host(harness.arguments(argv))  # before the run
    rows = []
    quiet = bool(os.environ.get("CI"))
    with tqdm(total=len(settings) * opt.reps, desc="model_step", disable=quiet) as bar:
        for device, shape, width in settings:
            rows += bench_setting(shape, width, torch.device(device), opt, bar)
    harness.publish(table(rows, opt, head), None if opt.quick else opt.out)


if __name__ == "__main__":
    main()

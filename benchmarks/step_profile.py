"""Where a training step's time goes: torch.profiler over a few steps of the base CCNN and of
DNArch at initialisation (benchmarks.model_step's step and settings), per device.

On CUDA a DNArch step takes about twice the base's whatever the network's size
(benchmarks/results/cuda_check.md): the GPU waits on the host. This prints, per variant and per
step, the operators the host ran, the kernels it launched, the host-device copies and the waits
for the GPU (cudaStreamSynchronize, cudaDeviceSynchronize, blocking copies), then the operators
that took the most host time, so that a fix can aim at the right ones.

    python -m benchmarks.step_profile --device cuda      # on a GPU machine
    python -m benchmarks.step_profile --device cpu --steps 2 --top 5
"""

from __future__ import annotations

import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import harness
from benchmarks.model_step import SHAPES, make_step
from dnarch_deploy import DNArch, ModelConfig
from search.train import flush_denormals

WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaEventSynchronize")
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
COPIES = ("cudaMemcpyAsync",)


def counts(prof, steps: int, closing_wait: bool = False) -> dict[str, float]:
    """Per step: top-level aten operators, kernel launches, async copies and waits
    (``closing_wait``: less the profile's own closing synchronize)."""
    events = list(prof.events())
    names = collections.Counter(e.name for e in events)
    top = sum(1 for e in events if e.name.startswith("aten::")
              and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))
    return {"aten ops": top / steps,
            "kernel launches": sum(names[n] for n in LAUNCHES) / steps,
            "async copies": sum(names[n] for n in COPIES) / steps,
            "waits": (sum(names[n] for n in WAITS) - closing_wait) / steps}


def profile_variant(learn: str, shape: str, width: int, device: torch.device, steps: int,
                    top: int) -> str:
    size, c_in, classes = SHAPES[shape]
    torch.manual_seed(0)
    model = DNArch(ModelConfig(in_channels=c_in, out_channels=classes, input_size=size,
                               width=width, learn=learn)).to(device).train()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, c_in, *size, generator=g).to(device)
    y = torch.randint(0, classes, (32,), generator=g).to(device)
    step = make_step(model, x, y, 1.0)
    for _ in range(3):  # warm-up: allocator, cuFFT plans
        step()
    if device.type == "cuda":  # nothing of the warm-up left in the profiled window
        torch.cuda.synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":  # the steps' kernels finish inside the window
            torch.cuda.synchronize(device)
    figures = counts(prof, steps, closing_wait=device.type == "cuda")
    lines = [f"### {shape}, H={width}, {'base' if learn == 'none' else 'DNArch init'} "
             f"({device.type}, {steps} steps)", "",
             " | ".join(f"{k}: {v:.0f}" for k, v in figures.items()) + " per step", "",
             "```", prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top),
             "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default=next(iter(SHAPES)), choices=list(SHAPES))
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=15, help="operators listed per variant")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    if args.steps < 1 or args.top < 1:
        parser.error("--steps and --top must be >= 1")
    device = torch.device(args.device)
    flush_denormals()  # as search.run trains and benchmarks.model_step times
    for learn in ("none", "KRWD"):
        print(profile_variant(learn, args.shape, args.width, device, args.steps, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())

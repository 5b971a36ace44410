"""What keeping freed memory in the process (search.train.keep_freed_memory) saves a search.

glibc's malloc maps a large allocation fresh and, once enough is freed at the top of its heap,
hands the pages back; a training step frees its activations together at its end, so the next
step maps and zeroes them again, one page fault per 4 KiB. ``search.run`` now tells malloc to
keep them. This runs the default search on each task twice per repetition, with the setting and
without (``keep_freed_memory`` replaced by a no-op in that process), in turns, one thread, and
reports the medians of the whole run's wall time, its training time (summary.json
``wall_seconds``), the process's system CPU time and its minor page faults. Results are
identical either way (allocation does not touch the arithmetic).

    python -m benchmarks.allocator --tasks ucr:OSULeaf mnist5k --steps 200 --reps 3
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

from benchmarks import harness
from benchmarks.harness import ROOT

# one search in a fresh process; prints its figures as JSON on the last line
CHILD = """
import json, resource, sys, time
import search.train
if sys.argv[1] == "off":
    search.train.keep_freed_memory = lambda: False
from search.run import main
start = time.perf_counter()
code = main(sys.argv[2:])
if code:
    sys.exit(code)  # search.run has said why
usage = resource.getrusage(resource.RUSAGE_SELF)
out = sys.argv[sys.argv.index("--out") + 1]
summary = json.load(open(out + "/summary.json"))
print(json.dumps({"code": code, "wall": time.perf_counter() - start,
                  "train": summary["wall_seconds"], "sys": usage.ru_stime,
                  "faults": usage.ru_minflt, "metric": summary["test_metric"]}))
"""


def run(mode: str, task: str, steps: int, out: Path) -> dict:
    args = ["--task", task, "--steps", str(steps), "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", CHILD, mode, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:  # search.run's own one-line reason, or the end of a traceback
        lines = [line for line in done.stderr.splitlines() if line.strip()] or ["no output"]
        reason = lines[-1].removeprefix("error: ")
        raise SystemExit(f"error: the search on {task} failed: {reason}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(opt, rows: dict, argv: list[str]) -> str:
    lines = ["# Keeping freed memory in the process: a search with and without", "",
             *harness.header(__file__, argv, versions_note=f", {' '.join(platform.libc_ver())}"),
             f"Medians of {opt.reps} runs per task and mode, in turns, one thread, nothing else "
             "running.", "",
             "| task | keep freed memory | run s | training s | system CPU s | page faults "
             "| test metric | run / without |",
             "|---|---|---|---|---|---|---|---|"]
    for task in opt.tasks:
        without = statistics.median(r["wall"] for r in rows[task, "off"])
        for mode in ("on", "off"):
            rs = rows[task, mode]

            def med(key: str, rs=rs) -> float:
                return statistics.median(r[key] for r in rs)

            metrics = sorted({round(r["metric"], 6) for r in rs})
            lines.append(f"| {task} | {'yes' if mode == 'on' else 'no'} | {med('wall'):.1f} | "
                         f"{med('train'):.1f} | {med('sys'):.2f} | {med('faults'):.0f} | "
                         f"{', '.join(map(str, metrics))} | {med('wall') / without:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=["ucr:OSULeaf", "mnist5k"])
    parser.add_argument("--steps", type=int, default=200, help="optimiser steps per search")
    parser.add_argument("--reps", type=int, default=3, help="runs per task and mode")
    harness.add_report(parser, __file__)
    opt = parser.parse_args(argv)
    if platform.libc_ver()[0] != "glibc":
        raise SystemExit("error: keep_freed_memory sets glibc's malloc: glibc only")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp, \
            tqdm(total=len(opt.tasks) * opt.reps * 2, desc="allocator") as bar:
        for task in opt.tasks:
            for rep in range(opt.reps):
                for mode in ("on", "off"):  # in turns: load drifts hit both alike
                    out = Path(tmp) / f"{task.replace(':', '-')}-{mode}-{rep}"
                    rows.setdefault((task, mode), []).append(run(mode, task, opt.steps, out))
                    bar.update(1)
    harness.publish(report(opt, rows, harness.arguments(argv)), opt.out)


if __name__ == "__main__":
    main()

"""The paper's comparison on our data: base CCNN vs DNArch(K), DNArch(K,R), DNArch(K,R,W,D).

Every variant trains at the same budget (the base network's cost) with the same settings and seeds;
each run is a real `python -m search.run` into its own run directory, and the table is built from
their summary.json, metrics.jsonl and architecture.json. Runs are independent processes, several at
a time (--jobs), one thread each. A finished run directory is reused, an interrupted one resumed
from its last checkpoint: after a crash, the same command loses at most one epoch per run.

    python -m benchmarks.search_quality --seeds 5                    # the table in README
    python -m benchmarks.search_quality --quick --out /tmp/quality   # a fast sanity run

Writes benchmarks/results/search_quality.md (and prints it). Settings are CPU-scale (one to two
minutes of training per run on a 2-core machine); they are printed in the results file.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import code_state, fmt
from search.config import parse_args
from search.jobs import Run, set_flag

# variant -> (--learn, more flags); "λ=0" is the paper's §3.1 setting: no budget at all
VARIANTS = {"CCNN (base)": ("none", ()), "DNArch(K)": ("K", ()), "DNArch(K,R)": ("KR", ()),
            "DNArch(K,R) λ=0": ("KR", ("--lam", "0")), "DNArch(K,R,W,D)": ("KRWD", ())}
BASE, FULL, FREE, KONLY = "CCNN (base)", "DNArch(K,R,W,D)", "DNArch(K,R) λ=0", "DNArch(K)"
COMMON = ["--depth", "4", "--width", "32"]  # the base CCNN_{4,32} (the paper: CCNN_{4,140})
EARLY = 0.1  # the complexity ratio must be within +-10% after this share of the steps (fig. 7)
MNIST_FILE = "mnist5k-14px-1000.npz"  # the prepared subset, under OUT/data/


@dataclass(frozen=True)
class Setting:
    """One task at CPU scale: the --task name given to search.run, its flags, and what differs
    from the full-size task (printed in the results)."""

    task: str
    flags: tuple[str, ...]
    note: str


def settings(data_dir: Path) -> dict[str, Setting]:
    return {
        "ucr:GunPoint": Setting(
            "ucr:GunPoint", (),
            "the official split; every flag at its `python -m search.run` default "
            "(see 'Defaults in effect')"),
        "ucr:OSULeaf": Setting(
            "ucr:OSULeaf", ("--steps", "1000"),
            "the official split; 1000 steps (80 epochs)"),
        "mnist5k": Setting(
            f"npz:{data_dir / MNIST_FILE}",
            ("--epochs", "40", "--batch-size", "32"),
            "mnist5k's first 1000 training and 250 validation images and its whole 1000-image "
            "test split, 2x2 mean-pooled to 14x14 (mnist5k has no training-size option); "
            "40 epochs (at 20 every model was still improving), batch 32"),
        "darcy": Setting(
            "darcy:size=29,n_train=200", ("--epochs", "40"),
            "29x29 grid (solved on 57x57), 200 training samples, 100 val / 100 test; 40 "
            "epochs (at 18 every model was still improving), batch 8"),
        "listops": Setting(
            "listops:n_train=2000",
            ("--epochs", "20", "--batch-size", "32"),
            "the CPU-sized generator (lengths 51-199, depth <= 6), 2000 training samples; "
            "20 epochs, batch 32"),
    }


def prepare_mnist(path: Path) -> None:
    """A CPU-sized MNIST: mnist5k's first 1000 training / 250 validation images (already shuffled
    and stratified by the task) and its whole test split, 2x2 mean-pooled to 14x14."""
    if path.exists():
        return
    import numpy as np

    from dnarch_deploy.tasks import load_task

    task = load_task("mnist5k", seed=0)

    def pool(x):
        n = x.shape[0]
        return x.reshape(n, 1, 14, 2, 14, 2).mean(axis=(3, 5)).astype(np.float32)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, x_train=pool(task.x_train[:1000]), y_train=task.y_train[:1000],
             x_val=pool(task.x_val[:250]), y_val=task.y_val[:250],
             x_test=pool(task.x_test), y_test=task.y_test)
    os.replace(tmp, path)


def generate(task: str, seeds: int) -> None:
    """Generate (and cache) each generated task's data once, before runs start in parallel."""
    from dnarch_deploy.tasks import load_task

    if task.startswith(("darcy", "listops", "pathfinder")):
        for seed in range(seeds):  # generated tasks draw their data from the seed
            load_task(task, seed=seed)


def plan_runs(out: Path, table: dict[str, Setting], tasks: list[str], variants: list[str],
              seeds: int, quick: bool, more: list[str]) -> list[Run]:
    runs = []
    for key in tasks:
        s = table[key]
        extra = [*s.flags, *more]
        if quick:
            if "--steps" in extra:
                i = extra.index("--steps")
                extra = extra[:i] + extra[i + 2:]
            extra = set_flag(extra, "--epochs", "2")
        # per seed, the base and DNArch(K,R,W,D) first: with two jobs they train side by side,
        # under the same load from other work, so their times compare
        order = sorted(variants, key=lambda v: (v not in (BASE, FULL), list(VARIANTS).index(v)))
        for seed in range(seeds):
            for variant in order:
                learn, more_flags = VARIANTS[variant]
                slug = harness.slug(key)
                flags = ["--task", s.task, "--learn", learn, "--seed", str(seed), *COMMON,
                         *more_flags, *extra]
                tag = "".join(f"-{f.lstrip('-').replace('-', '')}{v}"
                              for f, v in zip(more_flags[::2], more_flags[1::2]))
                name = f"{slug}-{learn}{tag}-s{seed}"
                runs.append(Run(key, variant, seed, out / name, flags))
    return runs


def trajectory(run_dir: Path) -> float:
    """max |C/C_target - 1| after the first EARLY share of the steps: over every epoch's mean of
    the training steps and every end-of-epoch value (metrics.jsonl)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["split"] in ("train", "val")]
    epochs = max(r["epoch"] for r in rows) + 1
    late = [r["complexity_ratio"] for r in rows if r["epoch"] >= EARLY * epochs]
    return max(abs(v - 1.0) for v in late)


def lowest_resolution(summary: dict) -> float:
    """The smallest share of the input's positions any block of the found network computes at
    (1.0: every block at full resolution)."""
    shares = [math.prod(r) for r in summary["vs_base"]["resolution"]]
    return min(shares, default=1.0)


def describe_arch(run_dir: Path) -> str:
    """One line: what the masks learned (R may be left out: search.resolve.learned), depth, stream
    width, and per block kernel size, resolution, widths."""
    a = json.loads((run_dir / "architecture.json").read_text())

    def axes(v: list[int]) -> str:
        return "x".join(str(x) for x in v)

    blocks = "; ".join(
        f"K {axes(b['kernel_size'])}, R {axes(b['resolution'])}, "
        f"{b['n_in']}/{b['n_mid']}/{b['n_out']}" for b in a["blocks"])
    return (f"learns {a['learn']}, depth {a['depth']} of {a['max_depth']}, stream "
            f"{a['stream_width']} of "
            f"{a['max_width']} (input {axes(a['input_size'])}): {blocks}")


def code_line(invocations: list[dict]) -> str:
    """The code the reported runs were trained with (recorded when each invocation started; the
    code at the time of writing the table when an older timings file has no record)."""
    states = list(dict.fromkeys(i.get("code") or code_state() for i in invocations))
    return "; ".join(states) if states else code_state()


@dataclass
class Findings:
    """What the table's rows add up to, for the targets."""

    verdicts: list[str] = field(default_factory=list)  # per task: DNArch(K,R,W,D) against base
    ratio_ok: list[bool] = field(default_factory=list)  # per full run: final ratio in range
    early_ok: list[bool] = field(default_factory=list)  # per full run: ratio steady early
    walls: list[str] = field(default_factory=list)  # per task: full / base training time
    archs: list[str] = field(default_factory=list)  # one line per task and variant shown
    free_lines: list[str] = field(default_factory=list)  # per task: λ = 0 against the base
    crop_tasks: list[str] = field(default_factory=list)  # tasks where most full runs crop
    wide_wins: list[str] = field(default_factory=list)  # tasks won by more than one std


def variant_row(key: str, variant: str, runs: list[Run], results: dict, failed: dict,
                found: Findings) -> tuple[str, tuple | None]:
    """The table's row of one task and variant, and its (mean metric, higher is better, a
    summary, std or None, ratios) for the comparisons (None: no run finished)."""
    mine = [r for r in runs if r.key == key and r.variant == variant]
    done = [r for r in mine if r.run_dir in results]
    lost = [r for r in mine if r.run_dir in failed]
    if not done:
        return f"| {key} | {variant} | failed |" + " |" * 10, None
    rs = [results[r.run_dir] for r in done]
    metric = [s["test_metric"] for s in rs]
    ratio = [s["complexity_ratio"] for s in rs]
    dev = [trajectory(r.run_dir) for r in done]
    lowest = [lowest_resolution(s) for s in rs]
    cropping = sum(v < 1.0 for v in lowest)
    note = f" ({len(lost)} failed)" if lost else ""
    row = (f"| {key} | {variant} | {rs[0]['metric_name']} {fmt(metric)}{note} "
           f"| {fmt(ratio)} | {fmt(dev)} | {fmt([s['vs_base']['distance'] for s in rs], 2)} "
           f"| {fmt(lowest, 2)} | {cropping} of {len(rs)} | {fmt([s['params'] for s in rs], 0)} "
           f"| {fmt([s['macs'] / 1e6 for s in rs], 2)} "
           f"| {fmt([s['wall_seconds'] for s in rs], 0)} |")
    if variant == FULL:
        found.ratio_ok += [0.95 <= v <= 1.05 for v in ratio]
        found.early_ok += [d <= 0.10 for d in dev]
        if 2 * cropping > len(rs):
            found.crop_tasks.append(key)
    if variant in (FULL, FREE):
        found.archs.append(f"- {key}, {variant} (seed {done[0].seed}): "
                           f"{describe_arch(done[0].run_dir)}")
    spread = statistics.stdev(metric) if len(metric) > 1 else None
    return row, (statistics.mean(metric), rs[0]["higher_is_better"], rs[0], spread, ratio)


def compare_variants(key: str, means: dict, runs: list[Run], results: dict,
                     found: Findings) -> None:
    """One task's comparisons: DNArch(K,R,W,D) against the base, and the base against
    DNArch(K,R) without a budget (with DNArch(K)'s cost beside it)."""
    if BASE in means and FULL in means:
        (b, higher, _, b_std, _), (f, _, summ, f_std, _) = means[BASE], means[FULL]
        better = f > b if higher else f < b
        wide = b_std is not None and f_std is not None and abs(f - b) > max(b_std, f_std)
        found.wide_wins += [key] if better and wide else []
        found.verdicts.append(f"{key} {'beats' if better else 'loses'} "
                              f"({summ['metric_name']} {f:.3f} vs {b:.3f}"
                              f"{', by more than one std' if wide else ', inside one std'})")
    if BASE in means and FREE in means and KONLY in means:
        (b, higher, _, _, _), (f, _, summ, _, ratio) = means[BASE], means[FREE]
        k_ratio = statistics.mean(means[KONLY][4])
        found.free_lines.append(
            f"{key}: cost {statistics.mean(ratio):.2f}x the base (DNArch(K) "
            f"{k_ratio:.2f}x), {summ['metric_name']} {f:.3f} vs base {b:.3f} "
            f"({'≥' if (f >= b if higher else f <= b) else '<'} base)")

        def wall(variant: str) -> float:
            return statistics.mean(results[r.run_dir]["wall_seconds"] for r in runs
                                   if r.key == key and r.variant == variant
                                   and r.run_dir in results)

        found.walls.append(f"{key} {wall(FULL) / wall(BASE):.2f}x")


def results_table(args, runs: list[Run], results: dict, failed: dict
                  ) -> tuple[list[str], Findings]:
    """The table: per task and variant, mean ± std over seeds of each figure."""
    lines = [
        "| task | model | test metric (mean ± std) | complexity ratio | max \\|ratio − 1\\| "
        "after 10% | distance from base | lowest R | cropping runs | params | MMACs | train s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    found = Findings()
    for key in args.tasks:
        means = {}
        for variant in args.variants:
            row, mean = variant_row(key, variant, runs, results, failed, found)
            lines.append(row)
            if mean is not None:
                means[variant] = mean
        compare_variants(key, means, runs, results, found)
    return lines, found


SHOWN = ("lam", "lr", "mask_lr", "weight_decay", "warmup", "dropout", "batch_size", "steps",
         "epochs", "shift", "jitter", "label_smoothing", "input_norm", "restarts", "omega_0",
         "tau_resolution", "tau_width", "tau_depth")  # the defaults the report lists


def header_lines(args, runs: list[Run], results: dict, timings: dict,
                 argv: list[str]) -> list[str]:
    """The title, what was compared, the command, machine, time, settings and code."""
    defaults = parse_args([])[0].to_dict()
    names = {r.run_dir.name for r in runs if r.run_dir in results}
    per_run = sum(v for k, v in timings["runs"].items() if k in names)
    trained = [i for i in timings["invocations"] if i["trained"]]
    return [
        "# Search quality: the paper's comparison at CPU scale",
        "",
        "Base CCNN (`--learn none`) against DNArch learning kernel sizes (K), + resolution (R), "
        "+ width and depth (W, D), all at the same budget (C_target = the base CCNN's cost), "
        "same settings, same seeds; each cell is the mean ± std over seeds of the run's "
        "summary.json (test metric at the best validation epoch). DNArch(K,R) λ=0 is the "
        "paper's §3.1 setting: resolution learned with no budget at all (`--lam 0`).",
        "",
        *harness.header(__file__, argv, machine_note=f", shared with other work, {args.jobs} "
                        "runs at a time, 1 thread each"),
        f"Time: the {len(results)} runs reported took {per_run / 60:.1f} min of run processes "
        f"(start-up, training, validation, test), about {per_run / 60 / args.jobs:.0f} min wall "
        f"at {args.jobs} at a time. Invocations that trained them: "
        + "; ".join(f"{i['seconds'] / 60:.1f} min wall from {i['started']} ({i['trained']} runs"
                    + (f", {len(names & set(i['runs']))} of them reported here"
                       if "runs" in i and not names >= set(i["runs"]) else "") + ")"
                    for i in trained) + ".  ",
        f"Common settings: `{' '.join(COMMON)}` (the base CCNN_{{4,32}}; the search may use up "
        f"to 8 blocks and 64 channels), budget 1.0, {args.seeds} seed(s) (0..{args.seeds - 1}); "
        "every other flag at its `python -m search.run` default unless listed below"
        + (" (**--quick: 2 epochs, 1 seed**)" if args.quick else "")
        + (f"; **every run also** `{args.extra}`" if args.extra else "") + ".  ",
        f"Defaults in effect: {', '.join(f'{k} {defaults[k]}' for k in SHOWN)}.  ",
        f"Code: {code_line(trained)}.",
    ]


def settings_lines(args, table: dict[str, Setting]) -> list[str]:
    """Per task its --task and flags, then what each column means."""
    lines = ["", "| task | `--task` | extra flags | what is CPU-scale |", "|---|---|---|---|"]
    for key in args.tasks:
        s = table[key]
        task = f"npz:OUT/data/{MNIST_FILE}" if s.task.startswith("npz:") else s.task
        lines.append(f"| {key} | `{task}` | `{' '.join(s.flags) or '(none)'}` | {s.note} |")
    return lines + [
        "",
        "Columns: *complexity ratio* is C/C_target of the architecture at the best validation "
        "epoch (the one reported); *max |ratio − 1| after 10%* is the largest deviation over "
        "each epoch's mean of the training steps and each end-of-epoch value, leaving out the "
        "epochs in the first 10% of training (paper fig. 7); *distance from base* is "
        "summary.json's `vs_base.distance` (docs/search.md: the mean over depth, width, "
        "resolution and kernel of |log2(found / base)|, 0 for the base); *lowest R* is the "
        "smallest share of the input's positions a block of the found network computes at; "
        "*cropping runs* counts the seeds whose network crops resolution somewhere; *params* "
        "and *MMACs* are the materialised network's (kernel network and masks gone); *train s* "
        "is the run's training time (summary.json wall_seconds: training epochs, not "
        "validation, start-up or test), on a machine shared with other jobs, so timings are "
        "noisy.",
        "",
    ]


def target_lines(found: Findings, failed: dict) -> list[str]:
    lines = [
        "## Targets",
        "",
        f"- DNArch(K,R,W,D) final complexity ratio in [0.95, 1.05]: {sum(found.ratio_ok)} of "
        f"{len(found.ratio_ok)} runs.",
        f"- DNArch(K,R,W,D) complexity ratio within ±10% after the first 10% of training: "
        f"{sum(found.early_ok)} of {len(found.early_ok)} runs.",
        f"- DNArch(K,R,W,D) beats the base CCNN (mean over seeds) on "
        f"{sum('beats' in v for v in found.verdicts)} of {len(found.verdicts)} tasks, by more "
        f"than one std on {len(found.wide_wins)}: " + "; ".join(found.verdicts) + ".",
        f"- DNArch(K,R,W,D) crops resolution in at least one block (in most seeds) on "
        f"{len(found.crop_tasks)} of {len(found.verdicts)} tasks"
        + (f": {', '.join(found.crop_tasks)}" if found.crop_tasks else "") + ".",
        "- DNArch(K,R) without a budget (λ = 0): " + ("; ".join(found.free_lines) or "not run")
        + ".",
        "- DNArch(K,R,W,D) training time / base CCNN training time (mean over seeds): "
        + ", ".join(found.walls) + ".",
    ]
    if failed:
        lines += ["", "Failed runs: " + ", ".join(p.name for p in failed) + "."]
    return lines


def report(args, table: dict[str, Setting], runs: list[Run], results: dict, failed: dict,
           timings: dict, argv: list[str] = ()) -> str:
    rows, found = results_table(args, runs, results, failed)
    return "\n".join([*header_lines(args, runs, results, timings, argv),
                      *settings_lines(args, table), *rows, "", *target_lines(found, failed), "",
                      "## Architectures found (DNArch(K,R,W,D), one seed)", "",
                      "Per block: kernel size K and resolution R per axis, widths "
                      "n_in/n_mid/n_out.", "", *found.archs]) + "\n"


def read_timings(path: Path) -> dict:
    """timings.json: the wall time of every run and invocation, across resumes."""
    timings = json.loads(path.read_text()) if path.exists() else {}
    if "runs" not in timings:  # an older flat {run: seconds} file
        timings = {"runs": timings, "invocations": []}
    return timings


def main(argv: list[str] | None = None) -> int:
    argv = harness.arguments(argv)
    parser = harness.parser(__doc__)
    harness.add_searches(parser, __file__, out="runs/quality")
    parser.add_argument("--tasks", nargs="*", default=None, help="task keys (default: all)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    harness.add_quick(parser, "2 epochs, 1 seed: a sanity run")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: the table from the runs already finished")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = 1
    out = Path(args.out).resolve()
    table = settings(out / "data")
    args.tasks = args.tasks or list(table)
    unknown = [t for t in args.tasks if t not in table]
    if unknown:
        parser.error(f"unknown task keys {unknown}; choose from {list(table)}")

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    if "mnist5k" in args.tasks:
        prepare_mnist(out / "data" / MNIST_FILE)
    for key in args.tasks:
        generate(table[key].task, args.seeds)
    runs = plan_runs(out, table, args.tasks, args.variants, args.seeds, args.quick,
                     args.extra.split())
    if args.report_only:  # runs not finished are left out of the table
        runs = [r for r in runs if (r.run_dir / "summary.json").exists()]
    timings_path = out / "timings.json"
    timings = read_timings(timings_path)
    invocation = {"started": harness.utc(t0), "seconds": 0.0,
                  "trained": 0,  # updated after every run: a crash keeps it
                  "code": code_state()}  # at the start: the code the runs load
    timings["invocations"].append(invocation)
    session: dict[str, float] = {}

    def record(*_) -> None:
        timings["runs"].update(session)
        invocation.update(seconds=round(time.time() - t0, 1), trained=len(session),
                          runs=sorted(session))
        timings_path.write_text(json.dumps(timings, indent=1) + "\n")

    results, failed = harness.run_jobs(runs, args.jobs, session, after=record)
    record()
    harness.publish(report(args, table, runs, results, failed, timings, argv), args.results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

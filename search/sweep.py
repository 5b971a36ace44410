"""`python -m search.sweep --task T --budgets 0.125,0.25,0.5,1 --seeds N --out DIR`: what accuracy
each latency buys on a task, searched networks against the base CCNN made narrower or shallower.

One search per budget and seed, and the base CCNN family (``--learn none`` on a grid of widths and
depths), each a job (``python -m search.sweep --out DIR --job NAME``: a real ``python -m
search.run`` into DIR/runs/, then, in the job's process, export's pipeline as ``python -m
export.onnx --no-bench``); then every export's onnxruntime latency, in one session at batch 1 and
a large batch, models in turns (export.measure); then DIR/pareto.json, a row per model with the
Pareto-optimal rows marked, and DIR/pareto.png (search/pareto.py).

Flags this command does not know go to every search (``--steps 200 --width 8``); ``--seed``,
``--budget``, ``--out``, ``--learn``, ``--task`` and ``--resume`` are the sweep's own. Everything
is checked before any run starts: budgets, the task (loaded), the search and export flags, and an
existing DIR (refused unless ``--resume``, which continues it: finished runs and exports reused,
stopped runs resumed; the flags given must agree with DIR/sweep.json, those left out are taken
from it). ``--jobs N`` runs N jobs at a time, one thread each; ``--emit-jobs`` writes them as a job
array instead (DIR/jobs.txt, DIR/jobs.slurm), after which ``--resume`` measures and writes the
front. Errors a user can cause print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from dnarch_deploy import rundir
from dnarch_deploy import sweepdir as S
from dnarch_deploy.cli import add_fields, given_flags
from dnarch_deploy.io import atomic_write_text
from dnarch_deploy.progress import Progress

from . import jobs as J
from .config import parse_args
from .jobs import JobError, Run, check_saved, execute, export, export_options, set_flag

# search.run flags the sweep sets for each model
OWN = ("--seed", "--budget", "--out", "--resume", "--learn", "--task")
# sweep.json fields that must agree on --resume (the others add or drop models, or re-measure)
FIXED = ("task", "learn", "search_flags", "export_flags")


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2, before any run starts."""


@dataclass
class SweepConfig:
    task: str = "ucr:GunPoint"  # task name (`python -m search.tasks` lists them)
    budgets: str = "0.125,0.25,0.5,1"  # the searches' budgets: multiples of the base cost, > 0
    seeds: int = 1  # seeds 0..N-1 of every search and every base point
    out: str = ""  # the sweep directory (required)
    learn: str = "KRWD"  # what the searches learn (search.run --learn)
    # cost is about quadratic in the width and linear in the depth
    base_grid: str = field(default="auto", metadata={"help": (
        "the base CCNN family as WIDTHxDEPTH,... (e.g. 32x4,16x4,32x2); auto: the base width "
        "times sqrt(min(budget, 1)) for each budget at the base depth, and the base width at half "
        "the depth")})
    export_flags: str = field(default="--no-tune", metadata={"help": (
        "python -m export.onnx flags for every export; the default exports by the cost model "
        "(the lowering the searches priced; --tune: tactics timed per model)")})
    batch: int = 32  # the large batch, measured beside batch 1
    threads: int = 1  # onnxruntime intra-op threads of the latency measurement
    repeats: int = 20  # timed calls per model and batch size
    jobs: int = 1  # models trained and exported at a time, in local processes (one thread each)
    resume: bool = False  # continue DIR: reuse finished runs and exports, resume stopped runs
    emit_jobs: bool = False  # write the job array DIR/jobs.txt and DIR/jobs.slurm, run nothing
    job: str = ""  # run one model of DIR's plan (a line of jobs.txt: its run name) and stop


@dataclass(frozen=True)
class Model:
    """One model of the sweep: a search at a budget, or a base CCNN of a width and depth."""

    kind: str  # "search" or "base"
    budget: float | None
    width: int
    depth: int
    seed: int

    @property
    def name(self) -> str:
        if self.kind == "search":
            return f"search-b{self.budget:g}-s{self.seed}"
        return f"base-w{self.width}-d{self.depth}-s{self.seed}"


# --- reading the command line ---------------------------------------------------------------------


def parse_budgets(text: str) -> list[float]:
    try:
        budgets = [float(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--budgets {text!r}: expected comma-separated numbers, e.g. "
                         "0.125,0.25,0.5,1") from None
    if not budgets:
        raise UsageError(f"--budgets {text!r} is empty: give at least one budget, e.g. 0.5")
    bad = [b for b in budgets if not (math.isfinite(b) and b > 0)]
    if bad:
        raise UsageError(f"--budgets: every budget must be a positive number (a multiple of the "
                         f"base cost), got {bad[0]:g} in {text!r}")
    return sorted(set(budgets))


def parse_grid(text: str, width: int, depth: int, budgets: list[float]) -> list[list[int]]:
    """--base-grid as [[width, depth], ...]; ``auto`` as SweepConfig says."""
    if text.strip() == "auto":
        points = [(max(1, round(width * math.sqrt(min(b, 1.0)))), depth) for b in budgets]
        points.append((width, max(1, depth // 2)))
        return [list(p) for p in dict.fromkeys(points)]
    points = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        w, sep, d = item.lower().partition("x")
        if not (sep and w.isdigit() and d.isdigit() and int(w) > 0 and int(d) > 0):
            raise UsageError(f"--base-grid: {item!r} is not WIDTHxDEPTH with positive integers "
                             f"(e.g. 16x4)")
        points.append((int(w), int(d)))
    return [list(p) for p in dict.fromkeys(points)]


def parse(argv: list[str] | None) -> tuple[SweepConfig, set[str], list[str]]:
    """The sweep's configuration, the names of the flags typed, and the search flags."""
    def build() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="python -m search.sweep", allow_abbrev=False,
                                    description=__doc__.split("\n\n")[0],
                                    epilog="Other flags go to every python -m search.run.",
                                    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        add_fields(p, SweepConfig)
        return p

    args, rest = build().parse_known_args(argv)
    given = given_flags(build(), argv)
    if rest:
        given.add("search_flags")
    return SweepConfig(**vars(args)), given, rest


# --- the plan -------------------------------------------------------------------------------------


def make_plan(cfg: SweepConfig, search_flags: list[str], given: set[str]) -> dict:
    """sweep.json's content: everything the models and the measurement depend on. Default
    budgets the search cannot reach on the task are left out, with a note; given ones are
    checked with the task (check_task)."""
    for flag in search_flags:
        if flag.split("=")[0] in OWN:
            raise UsageError(f"{flag.split('=')[0]} is set by the sweep for each model; use "
                             f"the sweep's own flags (--task, --learn, --budgets, --seeds, --out)")
    budgets = parse_budgets(cfg.budgets)
    for name in ("seeds", "jobs", "batch", "threads", "repeats"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(cfg, name)}")
    base = _search_config(["--task", cfg.task, *search_flags], "search flags")
    resumed = cfg.resume and bool(cfg.out) and (Path(cfg.out) / S.PLAN).exists()
    base_ms = [] if resumed else base_time(cfg, search_flags)  # a resumed sweep keeps its own
    if "budgets" not in given:
        budgets = reachable_defaults(cfg, [*search_flags, *base_ms_flags(base_ms)], budgets)
    export_flags = shlex.split(cfg.export_flags)
    try:  # refused as python -m export.onnx refuses them, before any model trains
        export_options(export_flags)
    except ValueError as e:
        raise UsageError(f"--export-flags {shlex.join(export_flags)}: {e}") from None
    grid = parse_grid(cfg.base_grid, base.width, base.depth, budgets)
    return {"schema": S.PLAN_SCHEMA, "version": S.VERSION, "task": cfg.task, "learn": cfg.learn,
            "budgets": budgets, "seeds": cfg.seeds, "base_grid": grid,
            "search_flags": search_flags, "export_flags": export_flags,
            "batch": cfg.batch, "threads": cfg.threads, "repeats": cfg.repeats,
            **({"base_ms": base_ms} if base_ms else {})}


def base_time(cfg: SweepConfig, search_flags: list[str]) -> list[float]:
    """With --cost latency (and no --base-ms): the base network's milliseconds at each
    --latency-batch, timed once here, before any job starts, for every search of the sweep
    (sweep.json's ``base_ms``): their budgets then share one reference, timed on a quiet
    machine rather than beside other jobs. Otherwise (or with another machine's latency table,
    which then prices the base too) none."""
    from .resolve import model_config

    search = _search_config(["--task", cfg.task, *search_flags, "--learn", cfg.learn],
                            "search flags")
    if search.cost != "latency" or search.base_ms or not search.latency_table_here():
        return []
    try:
        mcfg = model_config(search, _task(cfg.task, search))
    except ValueError:  # a network over the limits: check_task says so, per model
        return []
    from export.base_latency import MeasurementError, base_milliseconds

    try:
        return base_milliseconds(mcfg, search.latency_batch, search.latency_table)
    except MeasurementError as e:
        raise UsageError(str(e)) from None


def _task(name: str, search, seed: int = 0):
    """The task ``name`` at ``seed``, as ``search`` (its search.run configuration) loads it."""
    from .tasks import TaskError, load_task

    try:
        return load_task(name, seed=seed, **search.task_options())
    except TaskError as e:
        raise UsageError(f"--task {name}: {e}") from None


def base_ms_flags(base_ms: list[float]) -> list[str]:
    return [flag for ms in base_ms for flag in ("--base-ms", repr(ms))]


def reachable_defaults(cfg: SweepConfig, search_flags: list[str], budgets: list[float]
                       ) -> list[float]:
    """The default budgets some network of the search space meets on the task (with --cost
    latency a small input's cheapest network may cost half the base); a note names the others.
    None reachable: an error."""
    from .resolve import learned, model_config
    from .run import unreachable_budget

    search = _search_config(["--task", cfg.task, *search_flags, "--learn", cfg.learn],
                            "search flags")
    task, why = _task(cfg.task, search), {}
    for b in budgets:  # per budget: below --crop-min-budget the search space has no R
        at = replace(search, budget=b)
        try:
            learned(at, task.spatial)
        except ValueError as e:  # --learn R where R is not learned: nothing to search
            why[b] = str(e)
            continue
        try:
            why[b] = unreachable_budget(at, model_config(at, task), b)
        except ValueError:  # a network over the limits: check_task says so, per model
            return budgets
    kept = [b for b in budgets if not why[b]]
    dropped = [b for b in budgets if why[b]]
    if not kept:
        raise UsageError(f"--budgets (default {cfg.budgets}): {why[dropped[0]]}")
    if dropped:
        print(f"note: default budget(s) {', '.join(f'{b:g}' for b in dropped)} left out: "
              f"{why[dropped[0]]} (--budgets chooses others)", file=sys.stderr)
    return kept


def models(plan: dict) -> list[Model]:
    """Per seed: the searches by budget, then the base family."""
    base = parse_args(["--task", plan["task"], *plan["search_flags"]])[0]
    out = []
    for seed in range(plan["seeds"]):
        out += [Model("search", b, base.width, base.depth, seed) for b in plan["budgets"]]
        out += [Model("base", None, w, d, seed) for w, d in plan["base_grid"]]
    return out


def run_of(model: Model, plan: dict, sweep_dir: Path) -> Run:
    """The search.run flags and run directory of a model."""
    flags = ["--task", plan["task"], *plan["search_flags"], "--seed", str(model.seed)]
    if model.kind == "search":
        flags += ["--learn", plan["learn"], "--budget", f"{model.budget!r}",
                  *base_ms_flags(plan.get("base_ms", []))]
    else:
        flags = set_flag(set_flag(flags, "--width", str(model.width)), "--depth",
                         str(model.depth)) + ["--learn", "none"]
    return Run(plan["task"], model.kind, model.seed, sweep_dir / S.RUNS / model.name, flags)


def _search_config(flags: list[str], what: str):
    """search.run's configuration from ``flags``, checked as search.run checks it."""
    try:
        cfg = parse_args(flags)[0]
    except SystemExit:  # argparse printed what it did not understand
        raise UsageError(f"{what} {shlex.join(flags)}: python -m search.run does not accept "
                         "them (see above)") from None
    try:
        cfg.validate()
        cfg.task_options()
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None
    return cfg


# --- checks before any run starts ---------------------------------------------------------------


def check_out(cfg: SweepConfig, given: set[str], plan: dict) -> tuple[Path, dict]:
    """DIR: new, or (--resume) a sweep whose fixed settings agree with the flags typed; the
    plan to follow (the saved one with the flags typed applied)."""
    if not cfg.out:
        raise UsageError("--out is required: the sweep directory to write (or to --resume)")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory")
    saved_path = out / S.PLAN
    if not cfg.resume:
        if out.exists() and any(out.iterdir()):
            what = "a sweep" if saved_path.exists() else "not empty"
            raise UsageError(f"--out {out} exists ({what}); pass --resume to continue it, or "
                             "choose another --out (nothing was changed)")
        return out, plan
    if not saved_path.exists():
        if out.exists() and any(out.iterdir()):
            raise UsageError(f"--resume: {out} is not a sweep directory (no {S.PLAN}); "
                             "nothing was changed")
        return out, plan
    try:
        saved = rundir.read_json(saved_path, tuple(plan), within=out)
    except rundir.RunError as e:
        raise UsageError(f"--resume: {e}") from None
    conflicts = [f"{'--' + k.replace('_', '-') if k != 'search_flags' else 'search flags'} "
                 f"(saved {saved[k]!r}, given {plan[k]!r})" for k in FIXED
                 if k in given and saved[k] != plan[k]]
    if conflicts:
        raise UsageError(f"--resume continues {out}, made with other settings: "
                         f"{', '.join(conflicts)} (nothing was changed)")
    merged = {**saved, **{k: plan[k] for k in plan if k in given}}
    if "base_grid" in given:  # "auto" follows the saved search flags and the budgets
        base = parse_args(["--task", merged["task"], *merged["search_flags"]])[0]
        merged["base_grid"] = parse_grid(cfg.base_grid, base.width, base.depth,
                                         merged["budgets"])
    return out, merged


def check_task(plan: dict, runs: list[Run]) -> None:
    """The task loads for every seed (generated data made and cached here, once, before jobs start
    side by side) and every model fits it and its budget (search.run's own checks; with --cost
    latency against the base's time the plan measured, or else its predicted one)."""
    from .run import UsageError as RunUsageError
    from .run import check_budget
    from .run import check_task as check_model

    loaded = {}
    for run in runs:
        cfg = _search_config(run.flags, f"model {run.run_dir.name}")
        if run.seed not in loaded:
            loaded[run.seed] = _task(plan["task"], cfg, run.seed)
        try:
            check_budget(cfg, check_model(cfg, loaded[run.seed]))
        except RunUsageError as e:
            raise UsageError(f"model {run.run_dir.name}: {e}") from None


def check_runs(runs: list[Run]) -> None:
    """Run directories already in DIR were made with the flags the plan gives them."""
    for run in runs:
        try:
            check_saved(run)
        except JobError as e:
            raise UsageError(f"{e} (nothing was changed)") from None


# --- running --------------------------------------------------------------------------------------


def train_and_export(run: Run, export_flags: list[str], timings: dict) -> rundir.Summary:
    """One model, in its job's process: its search (run, resumed or reused), then its export,
    in this process, unless one is there. Latency is measured later, for all models together."""
    summary = execute(run, timings)
    if not (run.run_dir / rundir.REPORT).exists():
        export(run, export_flags, timings)
    return summary


def job_command(sweep_dir: Path, run: Run) -> list[str]:
    """A model's job: ``python -m search.sweep --out DIR --job NAME`` (train_and_export)."""
    return ["search.sweep", "--out", str(sweep_dir.resolve()), "--job", run.run_dir.name]


def run_job(sweep_dir: Path, run: Run) -> rundir.Summary:
    """One model's job, in a process of its own (one thread: jobs.environment); its summary. A
    model trained, scored as shipped and exported starts none."""
    path, report = run.run_dir / rundir.SUMMARY, run.run_dir / rundir.REPORT
    if path.exists() and report.exists():
        summary = rundir.read_summary(run.run_dir)  # RunError: damaged, that model fails
        if summary.scored_as_shipped:
            return summary
    J.run_module(*job_command(sweep_dir, run))
    return rundir.read_summary(run.run_dir)


def run_all(sweep_dir: Path, runs: list[Run], jobs: int) -> tuple[dict, dict]:
    """Every model, ``jobs`` at a time, a log line each; (summaries, failures) by run dir."""
    summaries, failures = {}, {}
    with ThreadPoolExecutor(jobs) as pool, Progress(len(runs), "models", "model") as progress:
        futures = {pool.submit(run_job, sweep_dir, run): run for run in runs}
        for future in as_completed(futures):
            run = futures[future]
            progress.update(1)
            try:
                summary = summaries[run.run_dir] = future.result()
            except (JobError, OSError, ValueError) as e:  # a damaged summary: a RunError
                failures[run.run_dir] = e
                progress.write(f"FAILED {run.run_dir.name}: {e}")
                continue
            progress.note(model=run.run_dir.name, **{summary.metric_name: summary.test_metric},
                          ratio=summary.complexity_ratio)
    return summaries, failures


def measure(sweep_dir: Path, runs: list[Run], plan: dict) -> dict:
    """Every export measured in one session, in this process (export.measure): latency.json."""
    from export.infer import InputError
    from export.measure import measure_exports

    try:
        latency = measure_exports([r.run_dir for r in runs], tuple(dict.fromkeys(
            (1, plan["batch"]))), plan["threads"], plan["repeats"])
        atomic_write_text(sweep_dir / S.LATENCY, json.dumps(latency, indent=1) + "\n")
    except (InputError, OSError) as e:
        raise JobError(str(e)) from None
    return latency


def emit_jobs(sweep_dir: Path, runs: list[Run]) -> tuple[Path, Path]:
    """DIR/jobs.txt (one job per model; each resumes what a killed one left) and DIR/jobs.slurm
    (jobs.write_array)."""
    out = sweep_dir.resolve()
    return J.write_array(out / S.JOBS, out / S.SLURM,
                         ["python -m " + shlex.join(job_command(out, r)) for r in runs],
                         f"python -m search.sweep --out {shlex.quote(str(out))} --resume")


def main(argv: list[str] | None = None) -> int:
    from .pareto import against_base_front, draw, write_pareto

    t0 = time.perf_counter()
    try:
        cfg, given, search_flags = parse(argv)
        if cfg.job:
            return run_one(cfg)
        plan = make_plan(cfg, search_flags, given)
        out, plan = check_out(cfg, given, plan)
        if cfg.resume and "base_ms" not in plan and parse_args(
                ["--task", plan["task"], *plan["search_flags"]])[0].cost == "latency":
            print("note: this sweep was planned before a latency sweep timed its base once: "
                  "its searches not yet run time the base themselves", file=sys.stderr)
        todo = [(m, run_of(m, plan, out)) for m in models(plan)]
        runs = [run for _, run in todo]
        check_task(plan, runs)
        check_runs(runs)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / S.PLAN, json.dumps(plan, indent=1) + "\n")
    except (UsageError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cfg.emit_jobs:
        jobs, slurm = emit_jobs(out, runs)
        print(f"{len(runs)} jobs: {jobs} (one command per line), {slurm} (sbatch {slurm}); "
              f"then `python -m search.sweep --out {out} --resume` measures and writes the front")
        return 0
    summaries, failures = run_all(out, runs, cfg.jobs)
    if failures:
        print(f"error: {len(failures)} of {len(runs)} models failed (above); finished ones are "
              f"kept: `python -m search.sweep --out {out} --resume` continues", file=sys.stderr)
        return 1
    try:
        latency = measure(out, runs, plan)
    except JobError as e:
        print(f"error: measuring latency: {e}", file=sys.stderr)
        return 1
    pareto = write_pareto(out, plan, [(asdict(m), r.run_dir) for m, r in todo], summaries,
                          latency)
    draw(pareto, out / S.PARETO_PNG)
    front = sum(row["pareto"]["1"] for row in pareto["rows"])
    print(f"{out}: {len(runs)} models, {front} on the front at batch 1; {out / S.PARETO}, "
          f"{out / S.PARETO_PNG} ({time.perf_counter() - t0:.0f} s)")
    for batch in map(str, pareto["batches"]):
        dominated = against_base_front(pareto, batch)
        print(f"batch {batch}, mean over seeds: searched networks on or above the base family's "
              f"front at {sum(not d for d in dominated.values())} of {len(dominated)} budgets"
              + "".join(f"; {b:g} below {', '.join(d)}" for b, d in dominated.items() if d))
    return 0


def run_one(cfg: SweepConfig) -> int:
    """--job NAME: train and export one model of DIR's plan (a job of the sweep's own, or a
    task of a job array)."""
    out = Path(cfg.out)
    try:
        plan = rundir.read_json(out / S.PLAN, ("task", "search_flags", "export_flags"))
    except rundir.RunError as e:
        raise UsageError(f"--job needs a sweep's {S.PLAN} (the sweep, or --emit-jobs, writes "
                         f"it): {e}") from None
    runs = {r.run_dir.name: r for r in (run_of(m, plan, out) for m in models(plan))}
    if cfg.job not in runs:
        raise UsageError(f"--job {cfg.job}: not a model of {out / S.PLAN} "
                         f"(its models: {', '.join(runs)})")
    try:
        summary = train_and_export(runs[cfg.job], plan["export_flags"], {})
    except JobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{runs[cfg.job].run_dir}: test {summary.metric_name} {summary.test_metric:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

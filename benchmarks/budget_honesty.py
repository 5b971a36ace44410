"""Does a budget mean deployed cost? The searched network's measured latency against its budget,
and its accuracy against the base CCNN narrowed to the same measured latency (issue 15).

For each task, one ``python -m search.sweep`` into OUT/<task>/: a search per budget and seed, and
the base CCNN family (the base CCNN_{D,H} of the search flags, and narrower and shallower versions
of it spanning its latency down to about a quarter: FAMILY below), every model exported and its
onnxruntime latency measured in one session at batch 1 and 32. Then, from every sweep's pareto.json:

- Table 1, per task and budget: found / base measured latency at batch 1 and 32 (base: the
  CCNN_{D,H} of the same sweep and seed), mean ± std over seeds, beside the cost model's ratio
  (found MACs / base MACs), and whether the measured ratio is within ±20 % of the budget;
- Table 2, per task at budgets 0.25 and 0.5: the found network's test metric against the base
  point(s) whose batch-1 latency is within ±10 % of the found network's, and a verdict;
- the targets of issue 15, met or missed;
- Table 3, each budget's searched networks against the base family's front (issue 19);
- Tables 4-6: every model's means, its metric per seed, and each searched network's architecture
  and whether its run restarted (from its run directory).

    python -m benchmarks.budget_honesty                   # the full run (README's table)
    python -m benchmarks.budget_honesty --report-only     # the tables from OUT's sweeps again
    python -m benchmarks.budget_honesty --tasks ucr:GunPoint --seeds 1 --budgets 0.5,1 \\
        --base-grid 32x4,16x4 --jobs 1 --out /tmp/bh --results /tmp/bh.md --steps 30   # smoke

Flags this script does not know go to the sweep (``--repeats 50``, ``--export-flags=...``) and
through it to every ``python -m search.run`` (``--steps 200``, ``--cost latency``). A task whose
sweep directory exists is continued (the sweep's ``--resume``: finished runs and exports are
reused, latency is measured again). Writes benchmarks/results/budget_honesty.md (and prints it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT, code_state, fmt, slug
from benchmarks.search_quality import describe_arch
from dnarch_deploy import sweepdir as S
from dnarch_deploy.rundir import RunError, read_json
from search import sweep
from search.config import parse_args
from search.pareto import against_base_front, mean_points

TASKS = ["ucr:GunPoint", "ucr:ArrowHead", "digits"]  # 1-D, 1-D, 2-D (8x8): the cheap ones
# the base family: search.sweep's auto grid at these budgets (widths H * sqrt(c) at depth D, and
# H at D/2), and H/2 and H/4 at D/2. On GunPoint (CCNN_{4,32}) their onnxruntime latency at
# B=1 / B=32 is 1 / 1, 0.79 / 0.70, 0.61 / 0.47, 0.50 / 0.32 of the base; 0.52 / 0.52 (32x2),
# 0.33 / 0.24 (16x2), and 8x2 below those: at B=1 a narrower width saves less than a shallower depth
FAMILY = (1.0, 0.5, 0.25, 0.125)
MEASURED_TOL = 0.20  # target: the measured latency ratio within ±20 % of the budget
EQUAL_TOL = 0.10  # equal latency: a base point's batch-1 ms within ±10 % of the found network's
TARGETED = (0.25, 0.5, 1.0)  # the budgets of the latency target
COMPARED = (0.25, 0.5)  # the budgets of table 2 and of the accuracy target
WINS_NEEDED = 2  # target: wins at equal latency on >= 2 of 3 tasks, at each compared budget
# flags of the sweep this script sets itself (or that would make it do something else)
OWN = ("--task", "--resume", "--emit-jobs", "--job")


def family(search_flags: list[str], task: str) -> str:
    """The base CCNN family as --base-grid: FAMILY through search.sweep's auto rule, then H/2 and
    H/4 at D/2; H and D are the search flags' (search.run's defaults unless given)."""
    base = parse_args(["--task", task, *search_flags])[0]
    grid = sweep.parse_grid("auto", base.width, base.depth, list(FAMILY))
    half = max(1, base.depth // 2)
    grid += [[max(1, base.width // 2), half], [max(1, base.width // 4), half]]
    return ",".join(f"{w}x{d}" for w, d in dict.fromkeys(map(tuple, grid)))


# --- running the sweeps ---------------------------------------------------------------------------


def beside() -> list[str]:
    """Other processes busy now: the five with the most CPU above 5 % (ps: share of the CPU over
    each one's lifetime), this one left out."""
    try:
        text = subprocess.run(["ps", "-eo", "pid=,pcpu=,args=", "--sort=-pcpu"],
                              capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ["(ps failed)"]
    busy = []
    for line in text.splitlines():
        pid, pcpu, command = line.split(None, 2)
        if int(pid) != os.getpid() and float(pcpu) > 5 and not command.startswith("ps "):
            busy.append(f"{command[:70]} ({pcpu} %)")
    return busy[:5]


def run_sweeps(args, rest: list[str], invocations: list[dict], log: Path,
               argv: list[str]) -> list[str]:
    """One search.sweep per task, one after the other (each trains --jobs models at a time),
    this invocation recorded in ``log`` (invocations.json) after each; the tasks that failed."""
    _, _, search_flags = sweep.parse(rest)
    record = {"started": harness.utc(), "command": harness.command(__file__, argv),
              "code": code_state(), "tasks": {}}
    invocations.append(record)
    failed = []
    for i, task in enumerate(args.tasks, 1):
        out = Path(args.out) / slug(task)
        cmd = [sys.executable, "-m", "search.sweep", *rest, "--task", task,
               "--budgets", args.budgets, "--seeds", str(args.seeds), "--jobs", str(args.jobs),
               "--base-grid", args.base_grid or family(search_flags, task), "--out", str(out)]
        if (out / S.PLAN).exists():
            cmd.append("--resume")
        print(f"[{i}/{len(args.tasks)}] {shlex.join(['python', *cmd[1:]])}", flush=True)
        t0, load, busy = time.time(), os.getloadavg()[0], beside()
        code = subprocess.run(cmd, cwd=ROOT).returncode
        record["tasks"][task] = {"seconds": round(time.time() - t0), "exit": code,
                                 "load_before": round(load, 2),
                                 "load_after": round(os.getloadavg()[0], 2), "beside": busy}
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(json.dumps(invocations, indent=1) + "\n")
        if code != 0:
            failed.append(task)
    return failed


def load(out: Path, tasks: list[str]) -> dict[str, dict | str]:
    """Per task its sweep's pareto.json, or why there is none."""
    sweeps = {}
    for task in tasks:
        try:
            sweeps[task] = S.read_pareto(out / slug(task))
        except RunError as e:
            sweeps[task] = str(e)
    return sweeps


# --- the rows of a sweep --------------------------------------------------------------------------


def searches(pareto: dict, budget: float) -> list[dict]:
    return [r for r in pareto["rows"] if r["kind"] == "search" and math.isclose(r["budget"],
                                                                                 budget)]


def full_base(pareto: dict) -> dict[int, dict]:
    """By seed: the base CCNN_{D,H} row, D and H those the searches grew from."""
    grown = {(r["width"], r["depth"]) for r in pareto["rows"] if r["kind"] == "search"}
    return {r["seed"]: r for r in pareto["rows"]
            if r["kind"] == "base" and (r["width"], r["depth"]) in grown}


def base_points(pareto: dict) -> dict[str, list[dict]]:
    """The base family by WIDTHxDEPTH, each point's rows over seeds."""
    points: dict[str, list[dict]] = {}
    for r in pareto["rows"]:
        if r["kind"] == "base":
            points.setdefault(f"{r['width']}x{r['depth']}", []).append(r)
    return points


def mean_ms(rows: list[dict], batch: str = "1") -> float:
    return statistics.mean(r["ms"][batch] for r in rows)


def spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def within(ratio: float, budget: float) -> bool:
    return abs(ratio / budget - 1) <= MEASURED_TOL


# --- the tables -----------------------------------------------------------------------------------


def latency_table(sweeps: dict[str, dict],
                  budgets: list[float]) -> tuple[list[str], list[bool | None]]:
    """Table 1 and, per task, budget and batch, whether the measured ratio is within ±20 % (None:
    not measured)."""
    large = next((str(p["batches"][-1]) for p in sweeps.values()), "32")  # the sweeps' --batch
    lines = [f"| task | budget | cost model: found / base MACs | measured: found / base ms B=1 "
             f"| measured B={large} | within ±{MEASURED_TOL:.0%} of the budget (B=1 / "
             f"B={large}) |", "|---|---|---|---|---|---|"]
    checks = []
    for task, pareto in sweeps.items():
        base = full_base(pareto)
        for budget in budgets:
            found = [r for r in searches(pareto, budget) if r["seed"] in base]
            large = str(pareto["batches"][-1])
            targeted = any(math.isclose(budget, b) for b in TARGETED)
            if not found:
                why = "no base CCNN_{D,H} in the sweep" if not base else "no search"
                lines.append(f"| {task} | {budget:g} | {why} | | | |")
                checks += [None, None] if targeted else []
                continue
            cost = [r["macs"] / base[r["seed"]]["macs"] for r in found]
            ratios = {b: [r["ms"][b] / base[r["seed"]]["ms"][b] for r in found]
                      for b in ("1", large)}
            met = [within(statistics.mean(v), budget) for v in ratios.values()]
            checks += met if targeted else []
            lines.append(f"| {task} | {budget:g} | {fmt(cost)} | {fmt(ratios['1'])} "
                         f"| {fmt(ratios[large])} | "
                         + " / ".join("met" if m else "**missed**" for m in met)
                         + ("" if targeted else " (not a target budget)") + " |")
    return lines, checks


def verdict(found: list[float], base: list[float], higher: bool) -> str:
    """win / loss: better / worse by more than the larger of the two stds over seeds (one seed:
    no std, the sign decides); tie otherwise."""
    gain = (statistics.mean(found) - statistics.mean(base)) * (1 if higher else -1)
    margin = max(spread(found), spread(base))
    return "win" if gain > margin else "loss" if -gain > margin else "tie"


def at_equal_latency(found: list[dict], points: dict[str, list[dict]]
                     ) -> tuple[list[str], bool, dict[str, float]]:
    """The base points whose batch-1 ms (mean over seeds) is within ±10 % of the found network's
    (and True), else the nearest one (and False); every point's ms / found ms."""
    ms = mean_ms(found)
    ratio = {k: mean_ms(rows) / ms for k, rows in points.items()}
    equal = [k for k in points if abs(ratio[k] - 1) <= EQUAL_TOL]
    return equal or [min(points, key=lambda k: abs(math.log(ratio[k])))], bool(equal), ratio


def accuracy_table(sweeps: dict[str, dict], budgets: list[float]
                   ) -> tuple[list[str], dict[float, dict[str, str | None]]]:
    """Table 2 and, per compared budget and task, the verdict at equal latency (None where no
    base point is within ±10 %)."""
    lines = ["| task | budget | found: test metric | found ms B=1 | base point(s) at equal "
             f"latency (±{EQUAL_TOL:.0%}): WIDTHxDEPTH, ms / found ms, test metric "
             "| verdict |", "|---|---|---|---|---|---|"]
    verdicts: dict[float, dict[str, str | None]] = {}
    compared = [b for b in budgets if any(math.isclose(b, c) for c in COMPARED)]
    for task, pareto in sweeps.items():
        for budget in compared:
            verdicts.setdefault(budget, {})
            found = searches(pareto, budget)
            points = base_points(pareto)
            if not found or not points:
                lines.append(f"| {task} | {budget:g} | {'no run' if not found else ''} | | "
                             f"{'no base point' if not points else ''} | |")
                continue
            shown, equal, ratio = at_equal_latency(found, points)
            higher = pareto["higher_is_better"]
            sign = 1 if higher else -1
            best = max(shown, key=lambda k: sign * statistics.mean(
                r["test_metric"] for r in points[k]))
            metric = [r["test_metric"] for r in found]
            call = verdict(metric, [r["test_metric"] for r in points[best]], higher)
            verdicts[budget][task] = call if equal else None
            cells = "; ".join(f"{k}: {ratio[k]:.2f}x, {fmt([r['test_metric'] for r in points[k]])}"
                              for k in shown)
            if not equal:
                cells = f"none; nearest {cells}"
            lines.append(f"| {task} | {budget:g} | {pareto['metric_name']} {fmt(metric)} "
                         f"| {fmt([r['ms']['1'] for r in found])} | {cells} | "
                         + (f"{call} against {best}" if equal else
                            f"({call} against {best}, not at equal latency)") + " |")
    return lines, verdicts


def front_table(sweeps: dict[str, dict]) -> list[str]:
    """Table 3 (issue 19): per task, batch and budget, the searched networks' mean point against
    the base family's front (means over seeds), and per task and batch the count on or above it."""
    lines = ["| task | batch | budget | searched: ms, test metric (means over seeds) | on or "
             "above the base family's front | base points that dominate it |",
             "|---|---|---|---|---|---|"]
    for task, pareto in sweeps.items():
        for batch in map(str, pareto["batches"]):
            points = mean_points(pareto["rows"], batch)
            dominated = against_base_front(pareto, batch)
            for budget, by in dominated.items():
                ms, metric = points[f"search {budget:g}"]
                beaten = ", ".join(f"{k} ({points[k][0]:.3g} ms, {points[k][1]:.3f})" for k in by)
                lines.append(f"| {task} | {batch} | {budget:g} | {ms:.3g} ms, {metric:.3f} | "
                             f"{'no' if by else 'yes'} | {beaten} |")
            on = sum(not by for by in dominated.values())
            lines.append(f"| {task} | {batch} | **all** | | **{on} of {len(dominated)}** | |")
    return lines


def models(pareto: dict) -> dict[str, list[dict]]:
    """Every model of a sweep, each with its rows over seeds: the base family by WIDTHxDEPTH,
    the searches by budget."""
    points = {f"base {k}": rows for k, rows in base_points(pareto).items()}
    for budget in sorted({r["budget"] for r in pareto["rows"] if r["kind"] == "search"}):
        points[f"search, budget {budget:g}"] = searches(pareto, budget)
    return points


def points_table(sweeps: dict[str, dict]) -> list[str]:
    """Table 4: every point of every sweep, mean ± std over seeds of its test metric, deployed
    MACs and measured latency."""
    batches = next((list(map(str, p["batches"])) for p in sweeps.values()), ["1", "32"])
    lines = ["| task | model | test metric | MMAC / sample | "
             + " | ".join(f"ms B={b}" for b in batches) + " |",
             "|---|---|---|---|" + "---|" * len(batches)]
    for task, pareto in sweeps.items():
        for name, rows in models(pareto).items():
            ms = " | ".join(fmt([r["ms"][b] for r in rows]) for b in batches)
            lines.append(f"| {task} | {name} | {fmt([r['test_metric'] for r in rows])} | "
                         f"{fmt([r['macs'] / 1e6 for r in rows])} | {ms} |")
    return lines


def seeds_table(sweeps: dict[str, dict]) -> list[str]:
    """Table 5: every model's test metric per seed, so that a seed that every model finds hard
    (or one that only the searches do) can be seen behind the means."""
    seeds = sorted({r["seed"] for p in sweeps.values() for r in p["rows"]})
    lines = ["| task | model | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|---|" + "---|" * len(seeds)]
    for task, pareto in sweeps.items():
        for name, rows in models(pareto).items():
            by_seed = {r["seed"]: r["test_metric"] for r in rows}
            lines.append(f"| {task} | {name} | " + " | ".join(
                f"{by_seed[s]:.3f}" if s in by_seed else "–" for s in seeds) + " |")
    return lines


def architectures_table(out: Path, sweeps: dict[str, dict]) -> list[str]:
    """Table 6: each searched network with its test metric, whether its run restarted (the stall
    check), the base's milliseconds its budget was a share of at the end (``--cost latency``:
    summary.json's base_ms, after its latency checks) and the architecture it found, from the
    run directory, so that kernels at the 3-tap minimum or a restart can be read beside the
    metric. "–" where a file is gone or damaged, or nothing was timed."""
    lines = ["| task | budget | seed | test metric | ms / base (B=1 / large batch) | restarted "
             "| the budget's base ms, after the latency checks | architecture |",
             "|---|---|---|---|---|---|---|---|"]
    for task, pareto in sweeps.items():
        found = [r for r in pareto["rows"] if r["kind"] == "search"]
        base = full_base(pareto)
        for r in sorted(found, key=lambda r: (r["budget"], r["seed"])):
            own = base.get(r["seed"])  # the seed's own base: the ratios of table 1, one by one
            ratio = " / ".join(f"{r['ms'][b] / own['ms'][b]:.3f}" for b in sorted(r["ms"], key=int)
                               ) if own else "–"
            run_dir = out / slug(task) / r["run_dir"]
            try:
                arch = describe_arch(run_dir)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):  # gone, damaged
                arch = "–"
            try:
                summary = read_json(run_dir / "summary.json", ("restarts",), within=run_dir)
                restarted = "yes" if summary["restarts"] else "no"
                checked = " / ".join(f"{ms:.4g}" for ms in summary.get("base_ms") or []) or "–"
            except RunError:
                restarted = checked = "–"
            lines.append(f"| {task} | {r['budget']:g} | {r['seed']} | {r['test_metric']:.3f} | "
                         f"{ratio} | {restarted} | {checked} | {arch} |")
    return lines


def targets(checks: list[bool | None], verdicts: dict[float, dict[str, str | None]],
            sweeps: dict[str, dict | str], budgets: list[float]) -> list[str]:
    """The targets of issue 15, met or missed (two are not measured here)."""
    def word(ok: bool) -> str:
        return "met" if ok else "**missed**"

    lost = [t for t, p in sweeps.items() if isinstance(p, str)]
    done = [p for p in sweeps.values() if not isinstance(p, str)]
    unrun = [f"{b:g}" for b in TARGETED if not any(math.isclose(b, c) for c in budgets)]
    missing = [c for c in checks if c is None]
    ok = bool(checks) and all(checks) and not (lost or unrun)
    lines = [f"- Measured latency ratio (found / base, B=1 and the large batch) within "
             f"±{MEASURED_TOL:.0%} of the budget at budgets 0.25, 0.5 and 1, on every task: "
             f"{word(ok)} ({sum(c is True for c in checks)} of {len(checks)}"
             + (f"; {len(missing)} not measured" if missing else "")
             + (f"; budget(s) {', '.join(unrun)} not run" if unrun else "")
             + (f"; no result for {', '.join(lost)}" if lost else "") + ")."]
    seeds = min((len({r["seed"] for r in p["rows"] if r["kind"] == "search"}) for p in done),
                default=0)
    scale = "" if len(done) >= 3 and seeds >= 3 else (
        f" (the target asks for ≥ 3 tasks and ≥ 3 seeds; this run has {len(done)} task(s) "
        f"with results, {seeds} seed(s))")
    for budget in COMPARED:
        calls = next((v for b, v in verdicts.items() if math.isclose(b, budget)), None)
        if calls is None:
            lines.append(f"- At budget {budget:g}, DNArch(K,R,W,D) beats the narrowed base at "
                         "equal latency on ≥ 2 of 3 tasks: not run.")
            continue
        wins = [t for t, c in calls.items() if c == "win"]
        none = [t for t, c in calls.items() if c is None]
        lines.append(
            f"- At budget {budget:g}, DNArch(K,R,W,D) beats the narrowed base at equal latency "
            f"(±{EQUAL_TOL:.0%}) on ≥ {WINS_NEEDED} of 3 tasks: "
            f"{word(len(wins) >= WINS_NEEDED and not scale)} ({len(wins)} of {len(calls)}"
            + (f": {', '.join(wins)}" if wins else "")
            + (f"; no base point at equal latency on {', '.join(none)}" if none else "")
            + f"){scale}.")
    lines += ["- The training step not slower by more than 5 % at the base size: not measured "
              "here (`python -m benchmarks.model_step`).",
              "- The dashboard's Deployment view shows one cost model: not measured here."]
    return lines


# --- the report -----------------------------------------------------------------------------------


def setting_lines(out: Path, sweeps: dict[str, dict | str]) -> list[str]:
    """Per task: the sweep's settings (sweep.json) and measurement (pareto.json)."""
    lines = []
    for task, pareto in sweeps.items():
        if isinstance(pareto, str):
            lines.append(f"- {task}: no result ({pareto}).")
            continue
        try:
            plan = json.loads((out / slug(task) / S.PLAN).read_text())
        except (OSError, ValueError):
            plan = {}
        env = pareto.get("environment", {})
        lines.append(
            f"- {task}: learn {plan.get('learn', '?')}, search flags "
            f"`{shlex.join(plan.get('search_flags', [])) or '(none)'}`, export flags "
            f"`{shlex.join(plan.get('export_flags', [])) or '(none)'}`, base grid "
            f"{', '.join(f'{w}x{d}' for w, d in plan.get('base_grid', [])) or '?'}; "
            f"latency at batches {pareto['batches']}, {pareto.get('threads', '?')} onnxruntime "
            f"thread(s), median of {pareto.get('repeats', '?')} calls; measured with Python "
            f"{env.get('python', '?')}, torch {env.get('torch', '?')}, onnxruntime "
            f"{env.get('onnxruntime', '?')} on {env.get('cpu_count', '?')} CPUs"
            + (f"; the searches' budgets a share of the base's "
               f"{' / '.join(f'{ms:.4g}' for ms in plan['base_ms'])} ms (sweep.json's base_ms: "
               f"measured, in the latency table's time)"
               if plan.get("base_ms") else "") + ".")
    return lines


def invocation_lines(invocations: list[dict]) -> list[str]:
    lines = []
    for inv in invocations:
        lines.append(f"- From {inv['started']}: `{inv['command']}`; code {inv['code']}.")
        for task, t in inv["tasks"].items():
            busy = "; ".join(t["beside"]) or "nothing above 5 % CPU"
            lines.append(f"  - {task}: {t['seconds'] / 60:.1f} min wall, exit {t['exit']}; load "
                         f"average {t['load_before']} before, {t['load_after']} after; beside "
                         f"it at the start: {busy}.")
    return lines


def header_lines(args, sweeps: dict[str, dict | str], invocations: list[dict],
                 argv: list[str]) -> list[str]:
    """The title, the command, machine and versions, the sweeps and the invocations."""
    return [
        "# Budget honesty: does a budget mean deployed cost?",
        "",
        "Per task one `python -m search.sweep`: a DNArch search per budget and seed, the base "
        "CCNN family, every model exported (`python -m export.onnx`) and measured in one "
        "onnxruntime session, models in turns. *base* is the base CCNN_{D,H} the searches grew "
        "from, of the same sweep and seed; ratios are per seed, then mean ± std over seeds.",
        "",
        *harness.header(__file__, argv, harness.ORT,
                        machine_note=", shared with other work (below)",
                        versions_note=f" (writing this report); code {code_state()}"),
        "",
        "Sweeps:",
        "",
        *setting_lines(Path(args.out), sweeps),
        "",
        "Invocations that ran them (from OUT/invocations.json):",
        "",
        *(invocation_lines(invocations) or ["- none recorded (--report-only on sweeps made "
                                            "elsewhere)"]),
    ]


def report(args, sweeps: dict[str, dict | str], invocations: list[dict],
           argv: list[str] = ()) -> str:
    budgets = sweep.parse_budgets(args.budgets)
    done = {t: p for t, p in sweeps.items() if not isinstance(p, str)}
    table1, checks = latency_table(done, budgets)
    table2, verdicts = accuracy_table(done, budgets)
    return "\n".join([
        *header_lines(args, sweeps, invocations, argv),
        "",
        "## Measured latency against the budget",
        "",
        *table1,
        "",
        "## Accuracy at equal measured latency",
        "",
        f"The base point(s) whose batch-1 latency (mean over seeds) is within ±{EQUAL_TOL:.0%} of "
        "the found network's; the verdict is against the best of them: *win* / *loss* when the "
        "found network's mean test metric is better / worse by more than the larger of the two "
        "stds over seeds, *tie* otherwise. Where no base point is that close, the nearest is "
        "shown and the row does not count for the target.",
        "",
        *table2,
        "",
        "## Targets (issue 15)",
        "",
        *targets(checks, verdicts, sweeps, budgets),
        "",
        "## Against the base family's front (issue 19)",
        "",
        "Each budget's searched networks as one point (mean ms and mean test metric over seeds) "
        "against the base family's points (each a mean over seeds): *on or above the front* "
        "when no base point is at least as fast and at least as good, and better in one. "
        "Target: on or above at ≥ 2 of 4 budgets.",
        "",
        *front_table(done),
        "",
        "## Every point",
        "",
        "Each model of the sweeps, mean ± std over seeds: the base family by WIDTHxDEPTH, the "
        "searches by budget (MMAC: the deployed network's multiply-accumulates per sample, the "
        "cost model's: summary.json's macs).",
        "",
        *points_table(done),
        "",
        "## Every seed",
        "",
        "Each model's test metric per seed.",
        "",
        *seeds_table(done),
        "",
        "## Architectures found",
        "",
        "Each searched network: its measured time over its seed's base network's, what its masks "
        "learned, depth and stream width, then per block its kernel size K and resolution R per "
        "axis and its widths n_in/n_mid/n_out (the run's architecture.json); "
        "*restarted*: the run's stall check started it again (summary.json's restarts).",
        "",
        *architectures_table(Path(args.out), done),
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = harness.arguments(argv)
    parser = harness.parser(__doc__, allow_abbrev=False,
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                            epilog="Other flags go to python -m search.sweep and through it to "
                            "every python -m search.run.")
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="task names "
                        "(python -m search.tasks)")
    parser.add_argument("--budgets", default="0.25,0.5,1", help="the searches' budgets")
    harness.add_jobs(parser, seeds=3, what="models trained")
    parser.add_argument("--out", default="runs/budget_honesty", help="one sweep directory per "
                        "task below it")
    parser.add_argument("--base-grid", default="", help="the base family as WIDTHxDEPTH,... "
                        "(default: FAMILY in this file, from the base width and depth)")
    harness.add_report(parser, __file__, "--results")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: the tables from the sweeps in OUT")
    args, rest = parser.parse_known_args(argv)
    try:
        sweep.parse_budgets(args.budgets)
    except sweep.UsageError as e:
        parser.error(str(e))
    for flag in rest:
        if flag.split("=")[0] in OWN:
            parser.error(f"{flag.split('=')[0]} is set by this script (use --tasks; a sweep "
                         "directory that exists is resumed)")
    out = Path(args.out)
    path = out / "invocations.json"
    try:
        invocations = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError) as e:
        parser.error(f"{path} cannot be read: {e}")
    failed = [] if args.report_only else run_sweeps(args, rest, invocations, path, argv)
    if failed:
        print(f"error: the sweep of {', '.join(failed)} failed (above); the same command "
              "continues it", file=sys.stderr)
    sweeps = load(out, args.tasks)
    if all(isinstance(p, str) for p in sweeps.values()):  # nothing to report: results untouched
        why = "; ".join(f"{task}: {problem}" for task, problem in sweeps.items())
        print(f"error: no sweep in {out} has a usable pareto.json ({why}); {args.results} "
              "not written", file=sys.stderr)
        return 1
    harness.publish(report(args, sweeps, invocations, argv), args.results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

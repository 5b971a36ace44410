"""What the found networks' crops cost when deployed, and what they would cost with FFTs.

A block that crops resolution adds a spectral down- and up-sampling per cropped axis. Export lowers
each to MatMuls (``dnarch_deploy.operators.resample_macs``: one dense (n x size) matrix per line, or
a four-step split), so a crop of a 1-D axis costs ~n x size multiply-adds per channel and line,
where a textbook FFT would take ~1.25 (n log2 n + size log2 size)
(``dnarch_deploy.operators.resample_reference_macs``). The paper prices resampling at the FFT's
count (its appendix C), which is why its DNArch(K,R) without a budget finds cheaper networks.

For each group of run directories (same task, ``--learn``, ``--crop``, λ and budget), this
prints the found networks' deployed cost over the base CCNN's (the search's own figure,
``complexity_ratio`` for ``--cost macs``), the share of it that is resampling, the cost with the
resampling left out, and the cost with the resampling priced at the textbook FFT's count. It
trains nothing: it reads ``config.json``, ``summary.json`` and ``architecture.json``.

    python -m benchmarks.crop_cost OUT/ucr-OSULeaf-KR-lam0-s*      # search_quality's run dirs
    python -m benchmarks.crop_cost OUT/*-KR-lam0-s* --out crop_cost.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import fmt
from benchmarks.search_quality import lowest_resolution
from dnarch_deploy.cost import architecture_cost, architecture_operators
from dnarch_deploy.operators import resample_macs, resample_reference_macs
from dnarch_deploy.rundir import RunError, read_architecture, read_config, read_summary


def resampling_macs(arch) -> tuple[float, float]:
    """(as exported, at the textbook FFTs' count): the multiply-adds per sample of every
    spectral down- and up-sampling of a frozen architecture."""
    size = tuple(arch.input_size)
    exported = reference = 0.0
    for ops, block in zip(architecture_operators(arch), arch.blocks):
        for name, op in ops.items():
            if not name.startswith(("down", "up")):
                continue
            axis = int(name.removeprefix("down").removeprefix("up"))
            n, m = size[axis], block.resolution[axis]
            if name.startswith("up"):
                n, m = m, n
            form = op.kind.removeprefix("resample.")
            lines = op.macs / resample_macs(form, n, m)
            exported += op.macs
            reference += lines * resample_reference_macs(n, m)
    return exported, reference


def run_row(run_dir: Path) -> dict:
    """One run: its group key and its figures over the base CCNN's deployed MACs."""
    config, summary = read_config(run_dir), read_summary(run_dir)
    arch = read_architecture(run_dir)
    base = float(config["base_macs"])
    total = architecture_cost(arch)
    exported, reference = resampling_macs(arch)
    train = config["train"]
    key = (config["task"], config["model"]["learn"], config["model"].get("crop", "bin"),
           train["lam"], train["budget"])
    return {"key": key, "metric": summary["metric_name"], "test": summary["test_metric"],
            "cost": total / base, "share": exported / total,
            "without": (total - exported) / base,
            "fft": (total - exported + reference) / base, "lowest": lowest_resolution(summary)}


def table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["key"], []).append(r)
    lines = ["| task | learn | crop | λ | budget | runs | test metric | deployed cost / base | "
             "resampling share of it | without resampling / base | resampling at FFT count / "
             "base | lowest R |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (task, learn, crop, lam, budget), g in groups.items():
        col = {name: [r[name] for r in g] for name in g[0] if name not in ("key", "metric")}
        lines.append(
            f"| {task} | {learn} | {crop} | {lam:g} | {budget:g} | {len(g)} | {g[0]['metric']} "
            f"{fmt(col['test'])} | {fmt(col['cost'])} | {fmt(col['share'], 2)} | "
            f"{fmt(col['without'])} | {fmt(col['fft'])} | {fmt(col['lowest'], 2)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("run_dirs", nargs="+", type=Path, help="finished search run directories")
    harness.add_report(p)
    args = p.parse_args(argv)
    missing = [str(d) for d in args.run_dirs if not (d / "summary.json").is_file()]
    if missing:
        p.error("not a finished run directory (no summary.json): " + ", ".join(missing))
    try:
        rows = [run_row(d) for d in args.run_dirs]
    except RunError as e:  # a damaged config.json, summary.json or architecture.json
        print(f"error: {e}", file=sys.stderr)
        return 2
    head = harness.header(__file__, harness.arguments(argv),
                          versions_note=f"; code {harness.code_state()}")
    report = "\n".join([*head, "Costs in deployed MACs per sample over the base CCNN's "
                        "(config.json `base_macs`), mean ± std over runs; *lowest R*: the "
                        "smallest share of the input's positions a block computes at.", "",
                        table(rows)]) + "\n"
    harness.publish(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

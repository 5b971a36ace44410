"""Two per-operator latency tables compared point by point: what a re-measurement moved.

For every batch and operator kind, the points the two tables measured on the same shape (the
point's ``shape``, rank and resampling axis) are matched and the ratio new ms / old ms taken;
printed per kind: how many points matched, the median ratio and its range. Kinds whose lowering
did not change show the machine's drift between the two measurements; a kind that moved well
beyond them moved because its lowering did.

    git show d122d14~1:dnarch_deploy/data/latency_default.json > /tmp/old.json
    python -m benchmarks.latency_table_diff /tmp/old.json dnarch_deploy/data/latency_default.json
"""

from __future__ import annotations

import statistics
import sys

from benchmarks import harness
from dnarch_deploy.latency import LatencyTable


def ratios(old: LatencyTable, new: LatencyTable) -> dict[tuple[int, str], list[float]]:
    """new ms / old ms of the points both tables measured, by (batch, kind)."""
    out = {}
    for batch in sorted(set(old.points) & set(new.points)):
        for kind, points in old.points[batch].items():
            before = {(p.shape, p.dims, p.axis): p.ms for p in points}
            after = {(p.shape, p.dims, p.axis): p.ms for p in new.points[batch].get(kind, [])}
            out[batch, kind] = [after[k] / before[k] for k in before
                                if k in after and before[k] > 0]
    return out


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("old", help="the earlier table (JSON)")
    p.add_argument("new", help="the later table (JSON)")
    opt = p.parse_args(argv)
    tables = []
    for path in (opt.old, opt.new):
        try:
            tables.append(LatencyTable.load(path))
        except (OSError, ValueError) as e:
            p.error(f"{path}: {e}")
    old, new = tables
    print(f"Old: {opt.old} ({old.header.get('date', '?')}); new: {opt.new} "
          f"({new.header.get('date', '?')})\n")
    print("| batch | kind | matched points | new / old ms: median | range |")
    print("|---|---|---|---|---|")
    for (batch, kind), r in ratios(old, new).items():
        cells = (f"{statistics.median(r):.2f} | {min(r):.2f}-{max(r):.2f}" if r else "- | -")
        print(f"| {batch} | {kind} | {len(r)} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

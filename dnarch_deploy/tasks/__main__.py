"""python -m search.tasks [NAME ...]: list tasks with shapes, sizes and cache state."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from ..cli import add_fields, field_help
from . import TaskError, describe, list_tasks, load_task
from .cache import cache_root
from .registry import GENERATED, parse_name


@dataclass
class Args:
    names: list[str] = field(default_factory=list)  # tasks to show (default: every known task)
    seed: int = 0  # seed of the generated data and validation split
    cache_dir: str | None = None  # cache folder (default: $DNARCH_CACHE or ~/.cache/dnarch-deploy)
    generate: bool = False  # generate and cache generated tasks that are missing


def parse_args(argv: list[str] | None) -> Args:
    parser = argparse.ArgumentParser(
        prog="python -m search.tasks", description="List the data tasks, their shapes, sizes "
        "and cache state. Names may carry options, e.g. darcy:size=43,n_train=200.",
    )
    parser.add_argument("names", nargs="*", help=field_help(Args)["names"])
    add_fields(parser, Args, skip=("names",))
    return Args(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.names or list_tasks()
    header = ("task", "kind", "input", "out", "train/val/test", "metric", "cache")
    rows = []
    try:
        for name in names:
            if name == "npz:PATH":
                rows.append((name, "either", "(N,C,L) or (N,C,H,W)", "-", "from file", "-",
                             "user file"))
                continue
            if args.generate and parse_name(name)[0] in GENERATED:
                load_task(name, args.seed, args.cache_dir)
            row = describe(name, args.seed, args.cache_dir)
            rows.append((row["name"], row["kind"], row["input"], str(row["out"]),
                         "/".join(map(str, row["sizes"])), row["metric"], row["cache"]))
    except TaskError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"\ncache folder: {cache_root(args.cache_dir)} (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

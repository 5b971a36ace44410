"""``python -m dashboard [DIR]``: start the dashboard on a runs directory (localhost by default)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .server import command


def runs_note(runs: Path) -> str | None:
    """What to say on the terminal about the runs directory before the server starts: a note when
    nothing is at that path yet (a search started later writes it, and its runs appear on the
    page), so that a mistyped path is seen where it was typed; nothing otherwise."""
    if runs.exists():
        return None
    return (f"note: {runs} does not exist yet; the dashboard shows runs as searches write them "
            f"(python -m search.run --out {runs / 'NAME'})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m dashboard",
        description="Inspect dnarch-deploy run directories in a Streamlit dashboard.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("runs", nargs="?", default=os.environ.get("DNARCH_RUNS", "runs"),
                        help="directory holding run directories (env DNARCH_RUNS)")
    parser.add_argument("--host", default="localhost",
                        help="address to bind; 0.0.0.0 makes the dashboard reachable from "
                        "other machines")
    parser.add_argument("--port", type=int, default=8501, help="port to listen on")
    args = parser.parse_args(argv)
    runs = Path(args.runs)
    if runs.exists() and not runs.is_dir():
        parser.error(f"runs directory {runs} is not a directory: give the folder that holds "
                     f"the run directories (the argument, else $DNARCH_RUNS)")
    if note := runs_note(runs):
        print(note, file=sys.stderr, flush=True)
    print(f"dashboard on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    cmd = command(args.runs, args.host, args.port)
    os.execv(cmd[0], cmd)  # become the server: signals (Ctrl-C, terminate) reach it directly


if __name__ == "__main__":
    main()

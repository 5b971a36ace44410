"""``python -m dashboard [DIR]``: start the dashboard on a runs directory (localhost by default)."""

from __future__ import annotations

import argparse
import os

from .server import command


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
    print(f"dashboard on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    cmd = command(args.runs, args.host, args.port)
    os.execv(cmd[0], cmd)  # become the server: signals (Ctrl-C, terminate) reach it directly


if __name__ == "__main__":
    main()

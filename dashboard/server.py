"""Starting the Streamlit server for the dashboard (used by ``python -m dashboard``, the
screenshot script and the browser test)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

APP = Path(__file__).with_name("app.py")


def command(runs: str | Path, host: str = "localhost", port: int = 8501) -> list[str]:
    """The ``streamlit run`` command line: bound to ``host``, headless, no usage statistics."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--client.toolbarMode", "viewer",
        "--", "--runs", str(runs),
    ]


def free_port(host: str = "localhost") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_ready(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    """Wait until ``url``/_stcore/health answers ok; raise if the server exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the dashboard server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"the dashboard at {url} did not start within {timeout:.0f} s")


@contextlib.contextmanager
def running(runs: str | Path, host: str = "localhost", port: int | None = None,
            log: Path | None = None) -> Iterator[str]:
    """Start the dashboard on a free port, yield its URL, stop it afterwards."""
    port = port or free_port(host)
    out = open(log, "wb") if log else subprocess.DEVNULL
    env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    process = subprocess.Popen(command(runs, host, port), stdout=out, stderr=subprocess.STDOUT,
                               env=env)
    url = f"http://{host}:{port}"
    try:
        wait_ready(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            out.close()

"""`python -m dashboard DIR`: starts the server, bound to localhost by default."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import pytest

from dashboard import server


def test_command_binds_localhost_and_passes_runs_dir(tmp_path):
    cmd = server.command(tmp_path, port=8123)
    assert cmd[cmd.index("--server.address") + 1] == "localhost"
    assert cmd[cmd.index("--server.port") + 1] == "8123"
    assert cmd[-3:] == ["--", "--runs", str(tmp_path)]


@pytest.mark.slow
def test_python_m_dashboard_serves_the_app(empty_dir):
    port = server.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dashboard", str(empty_dir), "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://localhost:{port}"
        server.wait_ready(url, proc)
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            assert b"<!doctype html>" in response.read().lower()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert f"dashboard on http://localhost:{port}".encode() in proc.stdout.read()


def test_help_names_the_runs_directory():
    out = subprocess.run([sys.executable, "-m", "dashboard", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "DNARCH_RUNS" in out and "--port" in out and "localhost" in out


def test_runs_directory_from_flag_then_environment_then_default(monkeypatch):
    from dashboard.app import runs_root

    monkeypatch.delenv("DNARCH_RUNS", raising=False)
    assert str(runs_root([])) == "runs"
    monkeypatch.setenv("DNARCH_RUNS", "/data/runs")
    assert str(runs_root(["-q", "tests"])) == "/data/runs"  # foreign arguments are ignored
    assert str(runs_root(["--runs", "mine"])) == "mine"


def test_a_file_as_runs_directory_is_refused_before_the_server_starts(tmp_path):
    runs = tmp_path / "runs.txt"
    runs.write_text("not a folder")
    done = subprocess.run([sys.executable, "-m", "dashboard", str(runs)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert f"runs directory {runs} is not a directory" in done.stderr
    assert "dashboard on" not in done.stdout  # no server was started


def test_a_missing_runs_directory_is_named_on_the_terminal(tmp_path, monkeypatch, capsys):
    from dashboard import __main__ as cli

    started = []
    monkeypatch.setattr(cli.os, "execv", lambda path, args: started.append(args))
    cli.main([str(tmp_path / "typo")])
    err = capsys.readouterr().err
    assert f"note: {tmp_path / 'typo'} does not exist yet" in err
    assert f"--out {tmp_path / 'typo' / 'NAME'}" in err
    assert started and started[0][-1] == str(tmp_path / "typo")  # the server still starts
    cli.main([str(tmp_path)])  # an existing folder: no note
    assert "note:" not in capsys.readouterr().err

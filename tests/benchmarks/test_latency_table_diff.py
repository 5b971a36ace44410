"""python -m benchmarks.latency_table_diff as a user runs it: per batch and kind the matched points'
new / old ratio (a kind scaled by 0.5 reads 0.50, the others 1.00), and a missing or damaged
table refused in one message."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.benchmarks import scripts

BUNDLED = scripts.ROOT / "dnarch_deploy" / "data" / "latency_default.json"


def run(*args) -> subprocess.CompletedProcess:
    return scripts.run("latency_table_diff", *args)


@pytest.mark.slow
def test_a_kind_scaled_by_half_reads_half(tmp_path):
    data = json.loads(BUNDLED.read_text())
    for point in data["points"]["32"]["conv.matmul"]:
        point["ms"] *= 0.5
    new = tmp_path / "new.json"
    new.write_text(json.dumps(data))
    done = run(BUNDLED, new)
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"^\| (\d+) \| ([\w.]+) \| (\d+) \| ([\d.]+) \| ([\d.]+)-([\d.]+) \|$",
                      done.stdout, re.M)
    kinds = len(data["points"]["1"])
    assert len(rows) == 2 * kinds
    for batch, kind, n, median, lo, hi in rows:
        expected = "0.50" if (batch, kind) == ("32", "conv.matmul") else "1.00"
        assert (median, lo, hi) == (expected, expected, expected)
        assert int(n) == len(data["points"][batch][kind])


@pytest.mark.slow
def test_a_missing_or_damaged_table_is_refused(tmp_path):
    done = run(tmp_path / "nope.json", BUNDLED)
    assert done.returncode == 2 and "nope.json: " in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 1}')
    done = run(bad, BUNDLED)
    assert done.returncode == 2
    assert "bad.json: not a latency table" in done.stderr and not done.stdout

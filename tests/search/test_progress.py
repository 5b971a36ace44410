"""Progress that suits where it goes (dnarch_deploy.progress): a bar on a terminal; in a log
(stderr not a terminal, or CI) one plain line per validation round, no carriage returns."""

from __future__ import annotations

import io
import re

import pytest

from dnarch_deploy import progress as P
from dnarch_deploy import rundir as R

LINE = re.compile(r"^search (\d+)/(\d+) loss \S+ accuracy \S+ ratio \S+ elapsed \d+s$")


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty, ci, expected", [
    (True, None, True),  # a person at a terminal
    (False, None, False),  # a log: nohup, a scheduler's job
    (True, "1", False),  # CI, even on a pseudo-terminal
])
def test_interactive_is_a_terminal_outside_ci(monkeypatch, tty, ci, expected):
    monkeypatch.setattr(P.sys, "stderr", _Stream(tty))
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert P.interactive() is expected


def test_in_a_log_note_prints_one_plain_line_with_the_count_and_figures(monkeypatch):
    stream = _Stream(False)
    monkeypatch.setattr(P.sys, "stderr", stream)
    monkeypatch.delenv("CI", raising=False)
    with P.Progress(2000, "search", "step", initial=30) as progress:
        progress.update(10, loss="0.510")
        assert stream.getvalue() == ""  # steps alone say nothing in a log
        progress.note(loss=0.5123456, accuracy=0.95, ratio=1.00234)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "\r" not in stream.getvalue()
    assert re.fullmatch(r"search 40/2000 loss 0\.5123 accuracy 0\.95 ratio 1\.002 elapsed \d+s",
                        lines[0]), lines


def test_on_a_terminal_note_prints_no_plain_line(monkeypatch):
    stream = _Stream(True)
    monkeypatch.setattr(P.sys, "stderr", stream)
    monkeypatch.delenv("CI", raising=False)
    with P.Progress(100, "search", "step", enabled=True) as progress:
        assert progress.tty
        progress.update(5)
        progress.note(loss=0.5)
    assert not any(line.startswith("search 5/100 loss") for line in stream.getvalue().split("\n"))


def test_a_search_in_a_log_writes_one_line_per_validation_round(tiny_search):
    """The tiny search's stderr was a pipe: one 'search STEP/TOTAL ...' line per validation
    round, at that round's step, and no carriage-return bar updates."""
    run, stderr = tiny_search
    assert "\r" not in stderr
    lines = [line for line in stderr.splitlines() if line.startswith("search ")]
    val = [r for r in R.read_jsonl(run / R.METRICS) if r["split"] == "val"]
    assert val and len(lines) == len(val), stderr
    for line, row in zip(lines, val):
        match = LINE.match(line)
        assert match, line
        assert int(match[1]) == row["step"]
    total = {int(LINE.match(line)[2]) for line in lines}
    assert total == {val[-1]["step"]}  # the run's length, once trained

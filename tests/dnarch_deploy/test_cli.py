"""The one argparse builder for dataclass command lines (search.run, export.onnx, search.tasks)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from dnarch_deploy.cli import add_fields, field_help


@dataclass
class Options:
    steps: int = 3  # optimiser steps
    rate: float = 0.5  # learning rate
    name: str | None = None  # a name
    fast: bool = True  # go fast
    tag: list[str] = field(default=None, metadata={"help": "a tag (repeatable)"})
    mode: str = "a"  # one of a, b
    share: float = 0.95  # 95% of the energy


def test_fields_become_typed_flags_with_defaults_and_help():
    parser = argparse.ArgumentParser()
    add_fields(parser, Options, mode={"choices": ("a", "b")})
    assert vars(parser.parse_args([])) == vars(Options())
    args = parser.parse_args(["--steps", "7", "--rate", "2", "--name", "x", "--no-fast",
                              "--tag", "u", "--tag", "v", "--mode", "b"])
    assert vars(args) == dict(steps=7, rate=2.0, name="x", fast=False, tag=["u", "v"], mode="b",
                              share=0.95)
    helps = {a.dest: a.help for a in parser._actions}
    assert helps["steps"] == "optimiser steps" and helps["tag"] == "a tag (repeatable)"
    assert field_help(Options)["name"] == "a name"
    assert "95% of the energy" in parser.format_help()  # a plain % is not an argparse format


def test_skipped_and_special_fields():
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_fields(parser, Options, skip=("tag",), mode={"choices": ("a", "b")})
    assert "tag" not in vars(parser.parse_args([]))
    try:
        parser.parse_args(["--mode", "c"])
    except argparse.ArgumentError as e:
        assert "invalid choice" in str(e)
    else:
        raise AssertionError("--mode c was accepted")


@pytest.mark.slow
@pytest.mark.parametrize("module", ["search.run", "search.sweep", "search.tasks", "export.onnx",
                                    "export.infer", "export.measure", "export.latency_table"])
def test_every_command_prints_its_help(module):
    """--help of every command line prints and exits 0 (a help text with a bare % once crashed
    search.run --help)."""
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:") and "--help" in proc.stdout

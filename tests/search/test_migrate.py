"""Run directories from before the removed options (dnarch_deploy.migrate): a run that used one at
its old default loads as if it had never existed; one that used another value is refused in one
line naming the option and the last commit that supports it, by every reader (read_config,
load_run, Architecture.from_dict, python -m export.onnx)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dnarch_deploy import Architecture, ModelConfig, SchemaError
from dnarch_deploy import rundir as R
from dnarch_deploy.io import atomic_write_text
from dnarch_deploy.migrate import LAST_COMMIT, REMOVED

from .conftest import env

# (config.json section, field, a value other than the old default, the flag it was)
USED = [
    ("model", "block_norm", "mix", "--block-norm"),
    ("model", "block_output", "gelu", "--block-output"),
    ("model", "initial_kernel", 149, "--initial-kernel"),
    ("model", "kernel_floor", 0.125, "--kernel-floor"),
    ("train", "block_norm", "mix", "--block-norm"),
    ("train", "mixup", 0.2, "--mixup"),
    ("train", "mask_data", "val", "--mask-data"),
    ("train", "kernel_decay", 0.01, "--kernel-decay"),
    ("train", "lam_ramp", 0.25, "--lam-ramp"),
    ("train", "embed_dim", 32, "--embed-dim"),
]


def test_the_last_commit_is_349ea12():
    assert LAST_COMMIT == "349ea12"


def write_config(run_dir: Path, model: dict | None = None, train: dict | None = None) -> Path:
    """A config.json of this run version with extra model / train fields."""
    model_fields = ModelConfig(in_channels=1, out_channels=2, input_size=(40,), depth=1,
                               width=4).to_dict()
    record = {"schema": R.RUN_SCHEMA, "version": R.RUN_VERSION, "task": "t", "seed": 0,
              "model": {**model_fields, **(model or {})}, "train": dict(train or {})}
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / R.CONFIG, json.dumps(record))
    return run_dir / R.CONFIG


def set_fields(run_dir: Path, section: str, **fields) -> None:
    path = run_dir / R.CONFIG
    config = json.loads(path.read_text())
    config[section].update(fields)
    path.write_text(json.dumps(config))


def one_line_refusal(message: str, flag: str) -> None:
    assert len(message.strip().splitlines()) == 1, message
    assert flag in message and LAST_COMMIT in message, message


@pytest.mark.parametrize("section, field, value, flag", USED, ids=[f"{s}-{f}" for s, f, *_ in USED])
def test_read_config_refuses_a_removed_option_at_another_value(tmp_path, section, field, value,
                                                               flag):
    path = write_config(tmp_path, **{section: {field: value}})
    with pytest.raises(R.RunError) as error:
        R.read_config(tmp_path)
    message = str(error.value)
    one_line_refusal(message, flag)
    assert message.startswith(str(path)) and f"'{section}'" in message
    assert repr(value) in message


def test_the_first_removed_option_used_is_the_one_named(tmp_path):
    """Several used: one message, naming one of them (not a list of every one)."""
    write_config(tmp_path, model={"block_norm": "mix", "block_output": "gelu"},
                 train={"mixup": 0.2})
    with pytest.raises(R.RunError) as error:
        R.read_config(tmp_path)
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert sum(flag in message for flag in ("--block-norm", "--block-output", "--mixup")) == 1


def test_removed_options_at_their_old_default_load_as_if_never_there(tmp_path):
    """Every removed option at its old default in both sections: read_config drops them, the
    model section builds a ModelConfig, and nothing else changes."""
    write_config(tmp_path, model=dict(REMOVED), train={**REMOVED, "lam": 5.0})
    config = R.read_config(tmp_path)
    assert not set(REMOVED) & set(config.model) and not set(REMOVED) & set(config.train)
    assert ModelConfig(**config.model) == ModelConfig(in_channels=1, out_channels=2,
                                                      input_size=(40,), depth=1, width=4)
    assert config.train["lam"] == 5.0


def test_load_run_refuses_block_norm_mix_and_loads_block_norm_input(tiny_run, tmp_path):
    """A real run: with ``block_norm: "mix"`` recorded, load_run refuses it in one line; with
    ``"input"`` (the old default) it loads the same network as the run as written."""
    refused, kept = tmp_path / "mix", tmp_path / "input"
    shutil.copytree(tiny_run, refused)
    shutil.copytree(tiny_run, kept)
    set_fields(refused, "model", block_norm="mix")
    with pytest.raises(R.RunError) as error:
        R.load_run(refused, with_task=False)
    one_line_refusal(str(error.value), "--block-norm")
    set_fields(kept, "model", block_norm="input")
    set_fields(kept, "train", block_norm="input", mixup=0.0, mask_data="train")
    old, new = R.load_run(kept, with_task=False), R.load_run(tiny_run, with_task=False)
    assert old.model.config == new.model.config
    new_state = new.model.state_dict()
    assert all(torch.equal(v, new_state[k]) for k, v in old.model.state_dict().items())


def test_an_architecture_whose_blocks_end_on_the_gelu_is_refused(tiny_run):
    """architecture.json with ``block_output: "gelu"`` (the removed block form) is refused by
    Architecture.from_dict in one line; ``"pointwise"`` (every block's form now) reads as a file
    without the field."""
    data = json.loads((tiny_run / R.ARCHITECTURE).read_text())
    assert "block_output" not in data
    with pytest.raises(SchemaError) as error:
        Architecture.from_dict({**data, "block_output": "gelu"})
    one_line_refusal(str(error.value), "--block-output")
    assert Architecture.from_dict({**data, "block_output": "pointwise"}) == \
        Architecture.from_dict(data)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["config", "architecture"])
def test_export_refuses_a_run_with_a_removed_option_in_one_line(tiny_run, tmp_path, damage):
    """python -m export.onnx on a run that used a removed option: a non-zero exit, one line
    naming the option and the commit (no traceback), nothing exported."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    shutil.rmtree(run / R.EXPORT, ignore_errors=True)
    if damage == "config":
        set_fields(run, "model", block_norm="mix")
        flag = "--block-norm"
    else:
        path = run / R.ARCHITECTURE
        path.write_text(json.dumps({**json.loads(path.read_text()), "block_output": "gelu"}))
        flag = "--block-output"
    proc = subprocess.run([sys.executable, "-m", "export.onnx", str(run)], capture_output=True,
                          text=True, env=env(), timeout=600)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    one_line_refusal(proc.stderr, flag)
    assert not (run / R.EXPORT).exists()

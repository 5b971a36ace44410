"""Reading and writing run-directory files (issue #17): only regular files inside the run, with
a size limit; atomic writes that honour the umask; checkpoints checked against config.json; the
data fingerprint."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.torch import save_file

from dnarch_deploy import DNArch, ModelConfig
from dnarch_deploy import masks as M
from dnarch_deploy import rundir as R
from dnarch_deploy.io import atomic_write_text


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_atomic_writes_get_the_mode_of_a_plain_open(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        with open(tmp_path / "b.json", "w") as f:
            f.write("{}")
    finally:
        os.umask(old)
    mode = (tmp_path / "a.json").stat().st_mode & 0o777
    assert mode == (tmp_path / "b.json").stat().st_mode & 0o777 == 0o666 & ~umask


def test_records_are_read_only_as_regular_files_inside_the_run(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside.json"
    run.mkdir()
    outside.write_text('{"secret": 1}')
    (run / R.SUMMARY).symlink_to(outside)
    with pytest.raises(R.RefusedFile, match="outside the run directory"):
        R.read_json(run / R.SUMMARY, within=run)
    assert R.read_json(run / R.SUMMARY) == {"secret": 1}  # without ``within``: any file
    (run / R.METRICS).symlink_to("/dev/zero")
    with pytest.raises(R.RefusedFile, match="not a regular file"):
        R.read_jsonl(run / R.METRICS)
    (run / "inside.json").write_text("{}")
    (run / R.ARCHITECTURE).symlink_to(run / "inside.json")  # a link inside the run is fine
    assert R.read_json(run / R.ARCHITECTURE, within=run) == {}


def test_records_over_the_size_limit_are_refused(tmp_path, monkeypatch):
    path = tmp_path / R.METRICS
    path.write_text('{"step": 1}\n' * 100)
    monkeypatch.setattr(R, "MAX_RECORD_BYTES", 1000)
    with pytest.raises(R.RefusedFile, match="larger than"):
        R.read_jsonl(path)
    assert len(R.read_text(path, limit=2000)) == 1200


def test_a_damaged_line_before_the_last_is_named(tmp_path):
    path = tmp_path / R.METRICS
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(R.RunError, match="line 2 is not valid JSON"):
        R.read_jsonl(path)
    path.write_text('{"a": 1}\n{"a": ')  # the last line, cut by a kill: skipped
    assert R.read_jsonl(path) == [{"a": 1}]


def test_checkpoint_of_another_shape_names_tensor_and_config(tmp_path):
    config = ModelConfig(in_channels=1, out_channels=2, input_size=(16,), depth=1, width=4)
    other = ModelConfig(in_channels=1, out_channels=2, input_size=(16,), depth=1, width=6)
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in DNArch(other).state_dict().items()}, str(path))
    with pytest.raises(R.RunError, match=r"model.safetensors: checkpoint does not match the "
                       r"model config.json describes: '.*' has shape \(12.*\) in the checkpoint"):
        R.load_weights(DNArch(config), path)


def _task(y_test):
    x = np.zeros((4, 1, 8), np.float32)
    y = np.array([0, 1, 0, 1])
    return SimpleNamespace(name="npz:d.npz", info={"seed": 0}, x_train=x, y_train=y, x_val=x,
                           y_val=y, x_test=x, y_test=np.asarray(y_test))


def _config(data: dict | None) -> R.Config:
    return R.Config(schema=R.RUN_SCHEMA, version=R.RUN_VERSION, task="npz:d.npz", seed=0,
                    model={}, train={}, data=data)


def test_data_fingerprint_and_check():
    task = _task([0, 1, 0, 1])
    config = _config(R.data_fingerprint(task))
    R.check_data("run", config, task, "--allow-data-change")  # unchanged: passes
    R.check_data("run", _config(None), _task([1, 1, 1, 1]), "--x")  # old runs: not checked
    with pytest.raises(R.RunError, match=r"changed.*run/config.json.*--allow-data-change"):
        R.check_data("run", config, _task([1, 1, 1, 1]), "--allow-data-change")


def test_a_config_from_before_a_model_field_reads_as_it_trained(tmp_path):
    """config.json records every model field; one written before sample_floor and pool existed
    gets the values those runs trained with, so they load and export as trained."""
    config = ModelConfig(in_channels=1, out_channels=2, input_size=(400,), depth=1, width=4,
                         input_norm="sample")
    model = config.to_dict()
    del model["sample_floor"], model["pool"]
    record = {"schema": R.RUN_SCHEMA, "version": R.RUN_VERSION, "task": "t", "seed": 0,
              "model": model, "train": {}}
    atomic_write_text(tmp_path / R.CONFIG, json.dumps(record))
    read_config = R.read_config(tmp_path)
    read = ModelConfig(**read_config.model)
    assert read.sample_floor == 1e-3
    assert read.pooling == ("mean",) and not hasattr(DNArch(read), "dec_w_max")
    assert read.kernel_sigma_range(0) == M.gaussian_sigma_range(399)
    assert float(DNArch(read).sample_eps()) == pytest.approx(1e-6)
    assert read_config.train["pool"] == "avg" and read_config.train["base_ms"] == []
    # the top-level fields recorded since read as None, and are not written back
    assert read_config.in_effect is None and read_config.trained_with() == read_config.train
    assert set(read_config.to_dict()) == set(record)
    fresh = ModelConfig(**model)
    assert fresh.sample_floor == 1e-6 and fresh.pool == "avgmax"

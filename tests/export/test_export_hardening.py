"""Export and inference with broken and hostile inputs (issue #17): one message naming the file or
flag, a non-zero exit, nothing overwritten; temporary folders of killed exports removed."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from dnarch_deploy import rundir as R
from export import infer
from export import onnx as export_cli
from export.pipeline import TMP_PREFIX, remove_stale
from search import run as search_run

from .conftest import run_module

QUICK = ["--no-tune", "--no-torchscript", "--no-bench", "--test-samples", "16",
         "--calibration-samples", "32"]


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    """No progress bars on stderr (the CLI runs in this process): stderr holds the message."""
    monkeypatch.setenv("CI", "1")


def tree(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in path.rglob("*")}


def one_message(err: str, *needles: str) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


# --- case 5: a checkpoint that does not match config.json ----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("section", "key", "value"), [
    ("model", "width", 6),  # an edited width
    ("model", "out_channels", 5),  # the config of a 5-class task
])
def test_export_of_a_checkpoint_that_does_not_fit_config(run_copy, section, key, value):
    config = json.loads((run_copy / R.CONFIG).read_text())
    config[section][key] = value
    (run_copy / R.CONFIG).write_text(json.dumps(config))
    before = tree(run_copy)
    proc = run_module("export.onnx", str(run_copy), *QUICK)
    assert proc.returncode == 1
    one_message(proc.stderr, "best.safetensors", "config.json", "has shape")
    assert tree(run_copy) == before


# --- case 6: export refuses data other than those the run was trained on -------------------------


@pytest.mark.slow
def test_export_refuses_changed_data_unless_allowed(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 1, 16)).astype(np.float32)
    data = tmp_path / "data.npz"
    np.savez(data, x_train=x, y_train=np.arange(40) % 2, x_test=x[:8], y_test=np.arange(8) % 2)
    run = tmp_path / "run"
    assert search_run.main(["--task", f"npz:{data}", "--depth", "1", "--width", "4",
                            "--batch-size", "8", "--epochs", "1", "--warmup", "0",
                            "--out", str(run)]) == 0
    np.savez(data, x_train=x * 100, y_train=np.arange(40) % 2, x_test=x[:8],
             y_test=np.arange(8) % 2)  # the file changed under the run
    before = tree(run)
    capsys.readouterr()
    assert export_cli.main([str(run), *QUICK]) == 1
    one_message(capsys.readouterr().err, str(data), "changed", "--allow-data-change")
    assert tree(run) == before and not (run / "export").exists()
    assert export_cli.main([str(run), *QUICK, "--allow-data-change"]) == 0
    assert (run / "export" / "model.onnx").is_file()


# --- case 8: temporary folders of killed exports -----------------------------------------------


def test_temporary_folders_of_killed_exports_are_removed(tmp_path):
    dead = 2**22 + 12345  # above Linux's pid_max: no such process
    for name in (f"{TMP_PREFIX}{dead}-abc", f"{TMP_PREFIX}old-{dead}",
                 f"{TMP_PREFIX}{os.getpid()}-live", f"{TMP_PREFIX}legacy1", f"{TMP_PREFIX}legacy2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.onnx").write_text("x")
    hour_ago = time.time() - 2 * 3600
    os.utime(tmp_path / f"{TMP_PREFIX}legacy1", (hour_ago, hour_ago))
    removed = {p.name for p in remove_stale(tmp_path)}
    assert removed == {f"{TMP_PREFIX}{dead}-abc", f"{TMP_PREFIX}old-{dead}",
                       f"{TMP_PREFIX}legacy1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{TMP_PREFIX}{os.getpid()}-live", f"{TMP_PREFIX}legacy2"]  # running, or recent


# --- case 7: export.infer ------------------------------------------------------------------------


@pytest.fixture
def export_copy(exported_run, tmp_path) -> Path:
    dst = tmp_path / "export"
    shutil.copytree(exported_run / "export", dst)
    return dst


@pytest.fixture
def good_input(tmp_path) -> Path:
    path = tmp_path / "x.npy"
    np.save(path, np.zeros((3, 1, 150), np.float32))
    return path


def infer_cli(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = infer.main([str(a) for a in args])
    return code, capsys.readouterr().err


def test_infer_empty_input_file(exported_run, tmp_path, capsys):
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    code, err = infer_cli(capsys, exported_run / "export", "--input", empty)
    assert code == 1
    one_message(err, f"--input {empty}", "not a readable .npy")


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_infer_missing_or_truncated_model(export_copy, good_input, capsys, damage):
    model = export_copy / "model.onnx"
    if damage == "missing":
        model.unlink()
    else:
        model.write_bytes(model.read_bytes()[:1000])
    code, err = infer_cli(capsys, export_copy, "--input", good_input)
    assert code == 1
    one_message(err, str(model), "python -m export.onnx")


def test_infer_model_of_another_export(export_copy, good_input, capsys):
    """architecture.json and model.onnx from two exports: named before anything runs."""
    path = export_copy / "architecture.json"
    spec = json.loads(path.read_text())
    spec["input"]["input_shape"] = [None, 2, 64]
    path.write_text(json.dumps(spec))
    np.save(good_input, np.zeros((3, 2, 64), np.float32))
    code, err = infer_cli(capsys, export_copy, "--input", good_input)
    assert code == 1
    one_message(err, "model.onnx takes (batch, 1, 150) float32", "(batch, 2, 64)",
                "different exports")


def test_infer_given_the_run_directory(exported_run, good_input, capsys):
    code, err = infer_cli(capsys, exported_run, "--input", good_input)
    assert code == 1
    one_message(err, f"{exported_run} is a run directory", str(exported_run / "export"))
    alone = good_input.parent / "run-without-export"  # a run not exported yet
    alone.mkdir()
    shutil.copy(exported_run / "architecture.json", alone)
    code, err = infer_cli(capsys, alone, "--input", good_input)
    assert code == 1
    one_message(err, "not an export's architecture.json", "looks like a run directory")


def test_infer_output_is_written_where_named(exported_run, good_input, tmp_path, capsys):
    folder = tmp_path / "predictions"
    folder.mkdir()
    code, err = infer_cli(capsys, exported_run / "export", "--input", good_input,
                          "--output", folder)
    assert code == 1
    one_message(err, f"--output {folder} is a directory")
    assert list(folder.iterdir()) == [] and not (tmp_path / "predictions.npy").exists()
    code, err = infer_cli(capsys, exported_run / "export", "--input", good_input,
                          "--output", tmp_path / "nowhere" / "y.npy")
    assert code == 1 and "does not exist" in err
    plain = tmp_path / "y.out"  # np.save alone would have written y.out.npy
    assert infer.main([str(exported_run / "export"), "--input", str(good_input),
                       "--output", str(plain)]) == 0
    assert np.load(plain).shape == (3, 2) and not (tmp_path / "y.out.npy").exists()


def test_infer_refuses_non_finite_input(exported_run, tmp_path, capsys):
    x = np.zeros((4, 1, 150), np.float32)
    x[2, 0, 7] = np.nan
    x[3, 0, 0] = np.inf
    np.save(tmp_path / "x.npy", x)
    code, err = infer_cli(capsys, exported_run / "export", "--input", tmp_path / "x.npy")
    assert code == 1
    one_message(err, "2 NaN or infinite value(s), in 2 sample(s) (first: sample 2)")
    with pytest.raises(infer.InputError, match="NaN"):
        infer.predict(exported_run / "export", x)


@pytest.mark.parametrize("text", ["x", "1,y", "0", "1,-2", ""])
def test_measure_refuses_bad_batches_before_any_work(tmp_path, capsys, text):
    """export.measure --batches: one message naming the flag and the value, exit 2, nothing
    written (the same type serves the benchmarks' --batches)."""
    from export import measure

    out = tmp_path / "m.json"
    with pytest.raises(SystemExit) as e:
        measure.main([str(tmp_path), "--out", str(out), "--batches", text])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --batches: expected comma-separated integers >= 1, got {text!r}" in err
    assert not out.exists()


def test_batch_sizes_parses_comma_separated_sizes():
    from export.timing import batch_sizes

    assert batch_sizes("1,32") == (1, 32) and batch_sizes("8") == (8,)

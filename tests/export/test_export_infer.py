"""python -m export.infer and export.predict: checked inputs, the same numbers as the artifacts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from export.infer import InputError, check_input, main, predict

from .conftest import run_module

SPEC = {"input_shape": [None, 2, 16], "input_dtype": "float32", "vocab_size": 0}
TOKENS = {"input_shape": [None, 10], "input_dtype": "int64", "vocab_size": 7}


def test_predict_matches_the_exported_program(exported_run):
    x = np.random.default_rng(1).standard_normal((7, 1, 150)).astype(np.float64)
    y = predict(exported_run / "export", x)  # float64 accepted, run as float32
    program = torch.export.load(str(exported_run / "export" / "model.pt2")).module()
    ref = program(torch.from_numpy(x.astype(np.float32))).numpy()
    assert y.shape == (7, 2) and np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (np.zeros((3, 1, 16), np.float32), r"shape \(3, 1, 16\); the model expects \(batch, 2, 1"),
        (np.zeros((2, 16), np.float32), r"add one: x\[None\]"),
        (np.zeros((0, 2, 16), np.float32), "shape"),
        (np.zeros((3, 2, 16), np.int64), "dtype int64; the model expects raw real values"),
    ],
)
def test_real_input_errors_say_what_is_expected(x, message):
    with pytest.raises(InputError, match=message):
        check_input(x, SPEC)


def test_token_input_checks():
    assert check_input(np.zeros((2, 10), np.int32), TOKENS).dtype == np.int64
    with pytest.raises(InputError, match="integer token ids"):
        check_input(np.zeros((2, 10), np.float32), TOKENS)
    with pytest.raises(InputError, match=r"token ids must lie in \[0, 7\)"):
        check_input(np.full((2, 10), 7), TOKENS)


def test_cli_writes_predictions(exported_run, tmp_path, capsys):
    x = np.random.default_rng(2).standard_normal((4, 1, 150)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    export_dir = exported_run / "export"
    x_file, y_file = str(tmp_path / "x.npy"), str(tmp_path / "y.npy")
    args = [str(export_dir), "--input", x_file, "--output", y_file]
    assert main([*args, "--tensorrt"]) == 0
    assert np.allclose(np.load(tmp_path / "y.npy"), predict(export_dir, x), atol=1e-6)
    assert "tensorrt is not installed: skipped" in capsys.readouterr().out  # none on CI machines


def test_cli_bad_input_one_message(exported_run, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((4, 150), np.float32))
    x = str(tmp_path / "x.npy")
    proc = run_module("export.infer", str(exported_run / "export"), "--input", x)
    assert proc.returncode != 0 and proc.stderr.startswith("error: input has shape (4, 150)")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert main([str(tmp_path), "--input", x]) != 0
    assert "architecture.json: not found" in capsys.readouterr().err


def test_the_reported_test_metric_is_the_exported_networks(exported_run):
    """summary.json's test accuracy and loss are what the shipped ONNX model scores on the whole
    test split (BatchNorm calibrated as export calibrates it), not the search's batch-statistics
    figures, which it records beside them."""
    from dnarch_deploy import rundir as R

    run = R.load_run(exported_run)
    logits = predict(exported_run / "export", np.asarray(run.task.x_test))
    labels = torch.as_tensor(np.asarray(run.task.y_test))
    accuracy = float((logits.argmax(-1) == labels.numpy()).mean())
    loss = float(torch.nn.functional.cross_entropy(torch.as_tensor(logits), labels))
    summary = R.read_summary(exported_run)
    assert summary.test_metric == pytest.approx(accuracy, abs=1e-12)
    # float32 rounding apart; the batch-statistics loss of this barely trained network differs
    # by about 1e-5
    assert summary.test_loss == pytest.approx(loss, rel=1e-6)
    assert summary.test_loss_batch_statistics != pytest.approx(loss, rel=1e-6)


@pytest.mark.parametrize("damage, field", [
    (lambda r: r.pop("backends"), "missing field 'backends'"),
    (lambda r: r["backends"]["tensorrt"].update(compatible="yes"),
     "field 'backends.tensorrt.compatible' must be true or false"),
    (lambda r: r["backends"].pop("tensorrt"), "missing field 'backends.tensorrt'"),
])
def test_tensorrt_refuses_a_damaged_report_in_one_line(exported_run, tmp_path, capsys,
                                                        monkeypatch, damage, field):
    """--tensorrt reads report.json through the record (no bare json.loads): a damaged one is
    one line naming the file and the field, exit 1, no traceback."""
    import json
    import shutil

    import export.infer as infer

    export_dir = tmp_path / "export"
    shutil.copytree(exported_run / "export", export_dir)
    report = json.loads((export_dir / "report.json").read_text())
    damage(report)
    (export_dir / "report.json").write_text(json.dumps(report))
    np.save(tmp_path / "x.npy", np.zeros((2, 1, 150), np.float32))
    monkeypatch.setattr(infer, "tensorrt_available", lambda: True)  # the report is read first
    assert main([str(export_dir), "--input", str(tmp_path / "x.npy"), "--tensorrt"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {export_dir / 'report.json'}: ") and field in err, err
    assert len(err.strip().splitlines()) == 1

"""The whole pipeline: python -m export.onnx on a real tiny run, artifacts, report, and the
failure modes (nothing written, an existing export survives)."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from dnarch_deploy import Architecture, DNArch, ModelConfig
from dnarch_deploy.calibration import calibrate
from dnarch_deploy.cost import architecture_cost
from dnarch_deploy.rundir import RunError, read_report
from export.onnx import main
from export.pipeline import ExportOptions, export_model, export_run
from export.policy import choose_tactics, least_regret
from export.static import freeze, materialize
from export.tactics import TACTICS
from export.verify import VerificationError

from .conftest import run_module
from .export_cases import random_input, random_model

STAGES = {"static", "lowered", "onnxruntime", "pt2", "torchscript"}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def leftovers(run: Path) -> list[str]:
    return [p.name for p in run.iterdir() if p.name.startswith(".export")]


def test_cli_writes_every_artifact(exported_run):
    files = {p.name for p in (exported_run / "export").iterdir()}
    assert files == {"model.onnx", "model.pt2", "model.ts", "architecture.json", "report.json"}
    assert leftovers(exported_run) == []
    model = onnx.load(str(exported_run / "export" / "model.onnx"))  # one self-contained file
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert not dims[0].HasField("dim_value")  # batch dynamic
    assert [d.dim_value for d in dims[1:]] == [1, 150]  # spatial size fixed


def test_each_gelu_is_one_node_and_each_1x1_layer_one_conv(exported_run):
    """Opset 20: GELU as one Gelu node, not five (Div, Erf, Add, Mul, Mul); a 1x1 layer as one
    Conv with its bias, not Reshape-MatMul-Reshape-Add (export.static.pointwise)."""
    model = onnx.load(str(exported_run / "export" / "model.onnx"))
    ops = [n.op_type for n in model.graph.node]
    assert {o.domain: o.version for o in model.opset_import}[""] == 20
    arch = json.loads((exported_run / "export" / "architecture.json").read_text())
    assert ops.count("Gelu") == 1 + arch["depth"] and "Erf" not in ops  # encoder + each block
    # the encoder's layer and two per block, besides the depthwise convolutions
    direct = sum(t == "direct" for t in json.loads(
        (exported_run / "export" / "report.json").read_text())["tactics"])
    assert ops.count("Conv") == 1 + 2 * arch["depth"] + direct


def test_report_has_what_other_tools_read(exported_run):
    report = json.loads((exported_run / "export" / "report.json").read_text())
    record = read_report(exported_run)  # the schema the dashboard reads it through
    assert record.to_dict() == report and list(record.to_dict()) == list(report)  # key order
    assert set(report["equivalence"]) == STAGES
    for err in report["equivalence"].values():
        assert err["max_rel"] <= 1e-4 and err["max_abs"] >= 0
    assert report["ops"] and all(isinstance(v, int) and v > 0 for v in report["ops"].values())
    assert set(report["backends"]) == {"onnxruntime", "tensorrt"}
    assert report["backends"]["onnxruntime"]["compatible"] is True
    dft = "DFT" in report["ops"]
    assert report["backends"]["tensorrt"]["compatible"] is (not dft)
    latency = report["latency"]
    arch = json.loads((exported_run / "export" / "architecture.json").read_text())
    names = ["encoder", *(f"blocks.{i}" for i in range(arch["depth"])), "decoder"]
    assert list(latency["layers"]) == names
    for entry in [*latency["layers"].values(), latency["total"]]:
        assert entry["measured_ms"] > 0 and entry["theoretical"] > 0
    assert latency["total"]["theoretical"] == pytest.approx(
        sum(v["theoretical"] for v in latency["layers"].values()))
    # "paper": the search's cost of the found architecture, the figure its budget constrained
    found = Architecture.from_dict(arch["found"])
    assert latency["total"]["paper"] == pytest.approx(architecture_cost(found), rel=1e-9)
    assert latency["threads"] == 1 and latency["batches"] == [1, 4]
    assert latency["tuned_for_batches"] == report["tuning"]["batches"] == [1, 4]
    # the ceiling: one large MatMul, same threads, same run; the model's GFLOP/s against it
    ceiling = latency["ceiling"]
    assert ceiling["gflops"] > 0 and ceiling["threads"] == 1
    for b in ("1", "4"):
        gflops = latency["total"]["achieved_gflops_by_batch"][b]
        ms = latency["total"]["measured_ms_by_batch"][b]
        assert gflops == pytest.approx(2 * latency["total"]["theoretical"] * int(b) / ms / 1e6)
        assert ceiling["fraction_by_batch"][b] == pytest.approx(gflops / ceiling["gflops"])
    assert set(latency["eager"]) == {"trained_ms", "static_ms", "lowered_ms"}


def test_architecture_json_has_physical_sizes_and_tactics(exported_run):
    arch = json.loads((exported_run / "export" / "architecture.json").read_text())
    report = json.loads((exported_run / "export" / "report.json").read_text())
    found = json.loads((exported_run / "architecture.json").read_text())
    assert arch["depth"] == found["depth"] == len(arch["blocks"])
    assert arch["stream_width"] == found["stream_width"]
    for block, spec in zip(arch["blocks"], found["blocks"]):
        assert block["tactic"] in TACTICS
        assert block["chosen_by"]["by"] == "measured" and block["chosen_by"]["batches"] == [1, 4]
        assert {"direct", "matmul", "dft"} <= set(block["chosen_by"]["ms"]) <= set(TACTICS)
        assert set(block["chosen_by"]["ms_by_batch"]) == {"1", "4"}
        # the resampling tactic per axis, and what chose it
        assert set(block["resample_tactics"]) == {"down", "up"}
        for kind, shapes in (("down", block["downsample"]), ("up", block["upsample"])):
            chosen, why = block["resample_tactics"][kind], block["chosen_by"]["resample"][kind]
            assert len(chosen) == len(shapes) == len(why) == len(block["resample_split"][kind])
            for tactic, e, n2 in zip(chosen, why, block["resample_split"][kind]):
                assert tactic == e["tactic"] in ("dense", "factored", "split")
                assert (n2 is None) == (tactic == "dense")
                if e["by"] == "measured":
                    assert tactic == least_regret(e["ms_by_batch"])
        for key in ("n_in", "n_mid", "n_out", "resolution"):
            assert block[key] == spec[key], key
        # the resolution mask on an uncropped axis is folded into the kernel: 2 R - 1 taps there
        size = arch["input"]["spatial"]
        assert block["kernel_taps"] == [2 * r - 1 if r == n else t for r, n, t in
                                        zip(spec["resolution"], size, spec["kernel_taps"])]
    assert [b["tactic"] for b in arch["blocks"]] == report["tactics"]


def test_tuned_export_keeps_the_fastest_whole_network_and_verifies(exported_run):
    """The per-layer winners are checked as a whole network against each single tactic; the
    kept assignment is the one exported, and it computes what the trained model computes."""
    arch = json.loads((exported_run / "export" / "architecture.json").read_text())
    report = json.loads((exported_run / "export" / "report.json").read_text())
    network = report["whole_network"]
    assert arch["whole_network"] == network and network["by"] == "measured whole network"
    candidates = {c["name"]: c for c in network["candidates"]}
    per_layer = [least_regret(b["chosen_by"]["ms_by_batch"]) for b in arch["blocks"]]
    measured = [t for t in TACTICS if all(t in b["chosen_by"]["ms"] for b in arch["blocks"])]
    # each single tactic for every block, and the per-layer winners at each batch, every
    # assignment timed once (under the first name that has it)
    assert list(candidates)[0] == "per-layer"
    assert candidates["per-layer"]["tactics"] == per_layer
    assignments = [c["tactics"] for c in candidates.values()]
    assert len({tuple(a) for a in assignments}) == len(assignments)
    for t in measured:
        assert [t] * arch["depth"] in assignments
        if t in candidates:
            assert candidates[t]["tactics"] == [t] * arch["depth"]
    for b in ("1", "4"):
        winners = [b_["chosen_by"]["fastest_by_batch"][b] for b_ in arch["blocks"]]
        assert winners in assignments
    assert all(0 < c["min_ms"] <= c["median_ms"] for c in candidates.values())
    # tuned for batches 1 and 4: the least worst slowdown over both
    assert network["batches"] == report["tuning"]["batches"] == [1, 4]
    table = {b: {n: c["ms_by_batch"][b] for n, c in candidates.items()} for b in ("1", "4")}
    kept = candidates[network["kept"]]
    assert network["kept"] == least_regret(table)
    assert report["tactics"] == kept["tactics"] == [b["tactic"] for b in arch["blocks"]]
    assert network["kept"] in network["why"]
    assert report["equivalence"]["onnxruntime"]["max_rel"] <= 1e-4
    assert ("DFT" in report["ops"]) == ("dft" in kept["tactics"])


@pytest.mark.parametrize("batch", [1, 5])
def test_artifacts_reload_and_agree(exported_run, batch):
    """At any batch: the batch axis of model.onnx and model.pt2 stays dynamic (traced at 2)."""
    from export.infer import predict

    out = exported_run / "export"
    x = np.random.default_rng(0).standard_normal((batch, 1, 150)).astype(np.float32)
    y_onnx = predict(out, x)
    y_pt2 = torch.export.load(str(out / "model.pt2")).module()(torch.from_numpy(x)).numpy()
    with pytest.warns(DeprecationWarning):
        y_ts = torch.jit.load(str(out / "model.ts"))(torch.from_numpy(x)).detach().numpy()
    scale = np.abs(y_pt2).max()
    assert y_pt2.shape == (batch, 2)
    assert np.abs(y_onnx - y_pt2).max() <= 1e-4 * scale
    assert np.abs(y_ts - y_pt2).max() <= 1e-4 * scale


@pytest.mark.parametrize("case", ["missing", "damaged", "version"])
def test_bad_run_one_message_nothing_written(run_copy, tmp_path, capsys, case):
    run = run_copy
    shutil.rmtree(run / "export")
    if case == "missing":
        run = tmp_path / "nope"
    elif case == "damaged":
        (run / "checkpoints" / "best.safetensors").write_bytes(b"\x00garbage" * 10)
    else:
        config = json.loads((run / "config.json").read_text())
        config["version"] = 99
        (run / "config.json").write_text(json.dumps(config))
    assert main([str(run), "--no-tune", "--no-bench"]) != 0
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.err
    assert {"missing": "not found", "damaged": "damaged", "version": "version"}[case] in lines[0]
    assert out.out == "" and not (run / "export").exists()
    if run.exists():
        assert leftovers(run) == []


@pytest.mark.slow
def test_cli_exits_non_zero_with_one_line(tmp_path):
    proc = run_module("export.onnx", str(tmp_path / "missing-run"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {tmp_path / 'missing-run'}: run "
                                                "directory not found"]


def test_failed_export_leaves_the_previous_one_intact(run_copy):
    run = run_copy
    before = snapshot(run / "export")
    (run / "checkpoints" / "best.safetensors").write_bytes(b"broken")
    with pytest.raises(RunError, match="damaged checkpoint"):
        export_run(run, ExportOptions(tune=False, bench=False))
    assert snapshot(run / "export") == before and leftovers(run) == []


@pytest.mark.slow
def test_failed_verification_writes_nothing(run_copy):
    run = run_copy
    before = snapshot(run / "export")
    options = ExportOptions(tune=False, bench=False, torchscript=False, tolerance=1e-15,
                            test_samples=16)
    with pytest.raises(VerificationError, match="differ from the trained model"):
        export_run(run, options)
    assert snapshot(run / "export") == before and leftovers(run) == []


@pytest.mark.slow
def test_successful_export_replaces_the_previous_one(run_copy):
    run = run_copy
    report = export_run(run, ExportOptions(tune=False, tactic="matmul", bench=False,
                                           torchscript=False, test_samples=16))
    files = {p.name for p in (run / "export").iterdir()}
    assert "model.ts" not in files and {"model.onnx", "model.pt2", "report.json"} <= files
    saved = json.loads((run / "export" / "report.json").read_text())
    assert saved["tactics"] == report.tactics == ["matmul"] * len(report.tactics)
    assert report.to_dict() == saved  # what export_run returns is what it wrote
    assert saved["latency"] is None and leftovers(run) == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 32])  # 1-D at 62 samples; 2-D blocks down to 1 x 1
def test_a_forced_dense_tactic_exports_every_artifact_exactly(tmp_path, seed):
    """--tactic dense: every block one MatMul, trained == static == lowered == onnxruntime ==
    .pt2 == TorchScript."""
    model = random_model(seed)
    options = ExportOptions(tune=False, tactic="dense", bench=False, batch_size=16)
    report = export_model(model, fake_task(model), tmp_path, options)
    assert report.tactics == ["dense"] * len(report.tactics) and report.tactics
    assert report.ops["MatMul"] >= len(report.tactics)
    assert set(report.equivalence) == STAGES
    assert all(err["max_rel"] <= 1e-4 for err in report.equivalence.values())


def test_a_forced_dense_tactic_on_a_long_block_is_refused_before_any_timing():
    model = DNArch(ModelConfig(in_channels=1, out_channels=2, input_size=(300,), depth=1,
                               width=8, learn="none"))
    model = calibrate(model, [torch.randn(4, 1, 300)], show_progress=False).eval()
    static = materialize(model, freeze(model))
    with pytest.raises(ValueError, match=r"^--tactic dense: block 0 computes on 300 positions "
                       r"\(300\), more than the dense tactic takes \(256\); choose another"):
        choose_tactics(static, ExportOptions(tactic="dense", batch=[1]))


def fake_task(model, n_train=40, n_test=12):
    return types.SimpleNamespace(x_train=random_input(model, n_train, seed=1).numpy(),
                                 x_test=random_input(model, n_test, seed=2).numpy())


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "tactic"), [(32, "dft"), (46, None)])  # 2-D dense; tokens
def test_export_model_two_d_tokens_dense(tmp_path, seed, tactic):
    model = random_model(seed)
    options = ExportOptions(tune=False, tactic=tactic, bench=False, batch_size=16)
    report = export_model(model, fake_task(model), tmp_path, options)
    assert set(report.equivalence) == STAGES
    assert all(err["max_rel"] <= 1e-4 for err in report.equivalence.values())
    if tactic == "dft" and report.tactics:
        assert report.ops["DFT"] > 0
        assert report.backends["tensorrt"] == {"compatible": False, "unsupported_ops": ["DFT"]}
    arch = json.loads((tmp_path / "architecture.json").read_text())
    assert all(b["chosen_by"]["by"] in ("cost", "forced") for b in arch["blocks"])
    assert "whole_network" not in arch and report.whole_network is None  # untuned: no check

"""The export pipeline: run directory -> RUN_DIR/export/, stage by stage.

    load -> calibrate -> freeze -> materialise -> lower (tactics: tuned per layer, then checked
         as whole networks; or by cost) -> emit
         -> verify (checks, equivalence) -> benchmark -> report.json

Everything is written into a temporary directory beside ``RUN_DIR/export`` and renamed into place
only when every stage, verification included, has succeeded: a failure never leaves half an export,
and an existing export is replaced only by a complete, verified one.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch

from dnarch_deploy import DNArch, calibration
from dnarch_deploy.calibration import calibrate, task_batches
from dnarch_deploy.io import atomic_write_text, process_alive
from dnarch_deploy.latency import DEFAULT_BATCHES
from dnarch_deploy.progress import interactive, log_line
from dnarch_deploy.records import Report
from dnarch_deploy.rundir import EXPORT, RunError, check_data, load_run

from .artifacts import (
    AOTI_FILE,
    ARCHITECTURE_FILE,
    ONNX_FILE,
    PT2_FILE,
    REPORT_FILE,
    SCHEMA,
    TS_FILE,
    VERSION,
)
from .bench import benchmark, theoretical_costs
from .emit import OPSET, write_aoti, write_pt2, write_torchscript
from .lowering import lower
from .policy import choose_lowering
from .static import StaticNet, freeze, materialize
from .tactics import TACTICS
from .timing import session
from .tune import NetworkExports
from .verify import (
    TOLERANCE,
    backend_compatibility,
    check_equivalence,
    check_onnx,
    equivalence,
    op_counts,
)


class ExportError(RuntimeError):
    """The export cannot be made (bad input, failed verification): nothing was written."""


@dataclass
class ExportOptions:
    tune: bool = True  # tactics by measured onnxruntime latency (False: by the cost model)
    tactic: str | None = None  # force one tactic for every block (benchmarks, debugging)
    torchscript: bool = True  # also write the legacy TorchScript model.ts
    aoti: bool = False  # also compile an AOTInductor package (tens of seconds)
    calibration_samples: int = calibration.SAMPLES  # training inputs for BatchNorm statistics
    batch_size: int = calibration.BATCH  # calibration and verification batch size
    test_samples: int = 256  # test inputs for the equivalence check
    tolerance: float = TOLERANCE  # max relative error allowed at every stage
    batch: list[int] = field(default=None, metadata={"help": (
        "a batch size the tactics are tuned for and latency is measured at; repeat the flag "
        "(--batch 1 --batch 32); default 1 and 32")})
    bench: bool = True  # measure latency (report.json "latency")
    threads: int = 1  # onnxruntime intra-op threads, and torch threads while measuring
    repeats: int = 20  # timing repeats (medians)
    per_layer: bool = True  # per-layer latency from sub-models
    allow_data_change: bool = False  # export although the data differ from the run's fingerprint

    def __post_init__(self) -> None:
        if self.tactic is not None and self.tactic not in TACTICS:
            raise ValueError(f"tactic must be one of {', '.join(TACTICS)}, got {self.tactic!r}")
        for name in ("calibration_samples", "batch_size", "test_samples", "repeats", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        self.batch = list(DEFAULT_BATCHES if not self.batch else dict.fromkeys(self.batch))
        if any(b < 1 for b in self.batch):
            raise ValueError(f"every --batch must be >= 1, got {self.batch}")


class StageClock:
    """Seconds per export stage; in a log (not a terminal), one line a stage."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.start = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(now - self.start, 3)
        self.start = now
        if not interactive():  # a terminal has the stages' bars
            log_line(f"export {stage}", seconds=self.seconds[stage])


def emit_artifacts(onnx_model: onnx.ModelProto, lowered, example: torch.Tensor, out: Path,
                   options: ExportOptions) -> None:
    """model.onnx, model.pt2, and on request model.ts and model.aoti.pt2, into ``out``."""
    onnx.save_model(onnx_model, str(out / ONNX_FILE))
    program = write_pt2(lowered, example, out / PT2_FILE)
    if options.torchscript:
        write_torchscript(lowered, example, out / TS_FILE)
    if options.aoti:
        write_aoti(program, out / AOTI_FILE)


def export_model(
    model: DNArch,
    task,
    out_dir: str | Path,
    options: ExportOptions | None = None,
    run_info: dict | None = None,
) -> Report:
    """Stages 1-7 for a trained model and its task; writes into ``out_dir`` (which must exist)
    and returns the report. Raises VerificationError when an artifact fails a check."""
    options = options or ExportOptions()
    out = Path(out_dir)
    clock = StageClock()
    if len(task.x_train) == 0 or len(task.x_test) == 0:
        raise ExportError("the task has no training inputs (for calibration) or no test inputs "
                          "(for the equivalence check)")
    calibrate(model, task_batches(task.x_train, options.batch_size, options.calibration_samples))
    clock.lap("calibrate")
    frozen = freeze(model)
    static = materialize(model, frozen)
    clock.lap("freeze_materialize")
    # network: tuned, the whole-network check of the per-layer choice (export.policy)
    exports = NetworkExports(static)  # tuning's whole networks; the shipped one among them
    tactics, resample, evidence, network = choose_lowering(static, options, exports)
    lowered = lower(static, tactics, resample)
    clock.lap("lower")

    x_test = np.asarray(task.x_test[: options.test_samples])
    example = torch.as_tensor(x_test[: min(2, len(x_test))])
    onnx_model = exports.get(tactics, resample)
    emit_artifacts(onnx_model, lowered, example, out, options)
    clock.lap("emit")

    check_onnx(onnx_model)
    ops = op_counts(onnx_model)
    stages = artifact_runners(model, static, lowered, out, options)
    step = options.batch_size
    errors = equivalence(stages, [x_test[i : i + step] for i in range(0, len(x_test), step)])
    check_equivalence(errors, options.tolerance)
    clock.lap("verify")

    latency = None
    if options.bench:
        latency = benchmark(model, static, lowered, onnx_model, example, options.batch,
                            options.threads, options.repeats, options.per_layer,
                            tuned_for=options.batch if options.tune and options.tactic is None
                            else None)
        clock.lap("benchmark")
    architecture = export_architecture(frozen.architecture.to_dict(), lowered, tactics, evidence,
                                       network)
    atomic_write_text(out / ARCHITECTURE_FILE, json.dumps(architecture, indent=1) + "\n")
    report = Report(
        schema=SCHEMA,
        version=VERSION,
        run=run_info or {},
        tactics=tactics,
        tuning=tuning_summary(options, network),
        whole_network=network or None,  # written only when there is one
        equivalence=errors,
        tolerance=options.tolerance,
        ops=ops,
        backends=backend_compatibility(ops),
        latency=latency,
        artifacts=sorted({p.name for p in out.iterdir()} | {REPORT_FILE}),
        options=asdict(options),
        seconds=clock.seconds,
        environment=environment(),
    )
    atomic_write_text(out / REPORT_FILE, json.dumps(report.to_dict(), indent=1) + "\n")
    return report


def tuning_summary(options: ExportOptions, network: dict | None) -> dict:
    """report.json ``tuning``: how the tactics were chosen and for which batches."""
    if options.tactic is not None:
        forced = {"by": "forced", "batches": None, "tactic": options.tactic}
        return {**forced, "stream": network["stream"]["kept"]} if network else forced
    if not options.tune:
        return {"by": "cost", "batches": None}
    out = {"by": "measured", "batches": list(options.batch), "threads": options.threads}
    if network and "kept" in network:
        out.update(kept=network["kept"], regret=network.get("regret"), why=network["why"])
    if network and "stream" in network:
        out["stream"] = network["stream"]["kept"]
    return out


def artifact_runners(model: DNArch, static: StaticNet, lowered: StaticNet, out: Path,
                     options: ExportOptions) -> dict:
    """numpy-in, numpy-out callables for every stage, artifacts loaded back from ``out``."""

    def eager(module):
        def run(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return module(torch.as_tensor(x)).numpy()

        return run

    sess = session(str(out / ONNX_FILE), options.threads)
    stages = {
        "trained": eager(model),
        "static": eager(static),
        "lowered": eager(lowered),
        "onnxruntime": lambda x: sess.run(None, {"x": x})[0],
        "pt2": eager(torch.export.load(str(out / PT2_FILE)).module()),
    }
    if (out / TS_FILE).exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            stages["torchscript"] = eager(torch.jit.load(str(out / TS_FILE)))
    if (out / AOTI_FILE).exists():
        from torch._inductor import aoti_load_package

        stages["aoti"] = eager(aoti_load_package(str(out / AOTI_FILE)))
    return stages


def export_architecture(found: dict, lowered: StaticNet, tactics: list[str],
                        evidence: list[dict], network: dict | None = None) -> dict:
    """architecture.json: the physical sizes of the exported network and each layer's tactic;
    ``network``: the whole-network tuning evidence (:func:`export.policy.fastest_network`), if
    any."""
    costs = theoretical_costs(lowered)
    spec = lowered.spec
    blocks = []
    for i, (block, tactic, why) in enumerate(zip(lowered.blocks, tactics, evidence)):
        conv = block.conv
        blocks.append({
            "index": block.index,
            "n_in": block.n_in,
            "n_mid": int(block.w1.shape[0]),
            "n_out": block.n_out,
            "resolution": list(block.bias1.shape[1:]),
            "kernel_taps": list(conv.taps),
            # a folded resolution mask's period (operators.conv_period): a MatMul FFT runs the
            # kernel circularly at it where that costs fewer MACs; null: no mask, or direct / dft
            "conv_period": None if conv.period is None else list(conv.period),
            "downsample": [list(m.sizes) for m in block.down],  # (S, R) per resampled axis
            "upsample": [list(m.sizes) for m in block.up],
            # per resampled axis: "dense" (one MatMul), "factored" or "split" (MatMul FFTs)
            "resample_tactics": getattr(block, "resample_tactics", {}),
            "resample_split": {k: [getattr(m, "n2", None) for m in getattr(block, k)]
                               for k in ("down", "up")},  # N2 of a factored axis
            "tactic": tactic,
            "fft_size": list(getattr(conv, "n", ())),
            "chosen_by": why,
            "theoretical_macs": costs[f"blocks.{i}"]["theoretical"],
        })
    return {
        "schema": SCHEMA + "-architecture",
        "version": VERSION,
        "input": spec,
        "stream_width": int(lowered.decoder.weight.shape[1]),
        "depth": len(blocks),
        "blocks": blocks,
        **({"whole_network": network} if network else {}),
        "opset": OPSET,
        "dynamic_axes": {"x": [0], "y": [0]},
        "found": found,
    }


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }


def export_run(run_dir: str | Path, options: ExportOptions | None = None) -> Report:
    """Load the run, export it into a temporary directory, and rename that to RUN_DIR/export
    on success. Raises RunError (bad run directory) or VerificationError: nothing written."""
    options = options or ExportOptions()
    run = load_run(run_dir)
    if run.task is None:
        raise RunError(f"{run_dir}: the run's task could not be loaded")
    if not options.allow_data_change:  # calibration and verification use the training data
        check_data(run_dir, run.config, run.task, "--allow-data-change")
    remove_stale(Path(run_dir))
    target = Path(run_dir) / EXPORT
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=run_dir))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would outlive the rename
        info = {"path": str(run.path), "task": run.config.task, "seed": run.config.seed}
        report = export_model(run.model, run.task, tmp, options, run_info=info)
        install(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


TMP_PREFIX = f".{EXPORT}-"  # .export-PID-XXXX (being written), .export-old-PID (being replaced)
LEGACY_SECONDS = 3600  # temporary folders of exports that did not name their process


def remove_stale(run_dir: Path) -> list[Path]:
    """Remove the temporary folders of exports that were killed (their process is gone, or,
    for folders that do not name one, untouched for an hour); returns them."""
    removed = []
    for path in run_dir.glob(TMP_PREFIX + "*"):
        parts = path.name[len(TMP_PREFIX):].split("-")
        pid = parts[1] if parts[0] == "old" and len(parts) > 1 else parts[0]
        if pid.isdigit():
            stale = not process_alive(int(pid))
        else:
            stale = time.time() - path.lstat().st_mtime > LEGACY_SECONDS
        if stale and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def install(tmp: Path, target: Path) -> None:
    """Replace ``target`` by ``tmp`` with renames only (the old export survives any failure
    before the second rename)."""
    old = None
    if target.exists():
        old = target.with_name(f"{TMP_PREFIX}old-{os.getpid()}")
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

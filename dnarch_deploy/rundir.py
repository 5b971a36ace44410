"""The run directory: the contract between search, export and the dashboard.

    RUN_DIR/
      config.json          resolved configuration, seed, package versions, device
      metrics.jsonl        one JSON object per logged step / epoch
      architectures.jsonl  one architecture snapshot per epoch
      architecture.json    the final architecture
      summary.json         test metric(s), complexity ratio, parameters, MACs, wall time
      checkpoints/         model.safetensors (last), best.safetensors, and epoch-NNNNN/ (the
                           newest epoch's model.safetensors and state.pt: what --resume reads)
      export/              written by export: model.onnx, model.pt2, model.ts, model.aoti.pt2,
                           architecture.json, report.json (schema: :func:`read_report`)

The file names, required keys and schema versions are written down here once; every reader goes
through these functions, which name the file and field when something is wrong. Nothing here
imports torch (only :func:`load_run` does), so readers of records and inference stay light.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .architecture import Architecture, SchemaError
from .tasks import Task, load_task

if TYPE_CHECKING:  # torch is imported only by load_run: reading records needs none
    from .model import DNArch

RUN_SCHEMA = "dnarch-run"
RUN_VERSION = 1

CONFIG = "config.json"
METRICS = "metrics.jsonl"
ARCHITECTURES = "architectures.jsonl"
ARCHITECTURE = "architecture.json"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
LAST_WEIGHTS = "checkpoints/model.safetensors"
BEST_WEIGHTS = "checkpoints/best.safetensors"
EXPORT = "export"

CONFIG_KEYS = ("schema", "version", "task", "seed", "model", "train")
# Model fields added after version 1 was written, with the value that reproduces what runs
# written before them trained: config.json records every model field, so a missing one is older.
MODEL_FIELDS_BEFORE = {
    "initial_kernel": 0,  # kernels started global
    "sample_floor": 1e-3,  # input_norm="sample" variance floor
    "pool": "avg",  # the global decoder read the channels' means only
    "kernel_floor": 0.0,  # kernels could shrink to 3 taps on every axis
}
# The same for the search's flags ("train"): every one added after version 1, with what runs
# written before it trained with (a resumed run must continue as it began, and search.jobs
# compares every flag, so a missing one would read as a changed one).
TRAIN_FIELDS_BEFORE = {"pool": MODEL_FIELDS_BEFORE["pool"], "label_smoothing": 0.0,
                       "crop_min_length": 0,  # R was learned on every input
                       "crop_min_budget": 0.0,  # and at every budget
                       "jitter": 0.0, "mixup": 0.0, "block_norm": "input",
                       "block_output": "pointwise",  # every block ended on a second mixing
                       "base_ms": [],  # --cost latency priced the base from the table
                       "kernel_floor": MODEL_FIELDS_BEFORE["kernel_floor"],
                       "kernel_decay": 0.0,  # no penalty on the sampled kernels
                       "mask_data": "train"}  # the masks stepped on the training batch
SUMMARY_KEYS = (
    "task", "learn", "metric_name", "test_metric", "complexity_ratio", "params", "macs",
    "wall_seconds",
)

# RUN_DIR/export/: written by export (export.pipeline), read by the dashboard and export.infer
EXPORT_SCHEMA = "dnarch-export"
# 2: "tuning" (the batches tactics were chosen for), latency "ceiling"; 3: latency "paper" is the
# search's cost model of the deployed network (before: appendix C's figure, resampling left out)
EXPORT_VERSION = 3
EXPORT_VERSIONS_READ = (1, 2, 3)  # version 1 reports (no tuning, no ceiling) still read
ONNX_FILE = "model.onnx"
PT2_FILE = "model.pt2"
TS_FILE = "model.ts"
AOTI_FILE = "model.aoti.pt2"
EXPORT_ARCHITECTURE_FILE = "architecture.json"
REPORT_FILE = "report.json"
REPORT = f"{EXPORT}/{REPORT_FILE}"
REPORT_KEYS = ("schema", "version", "equivalence", "ops", "latency", "backends")
# the largest record file any reader takes in (a 60-epoch run's metrics.jsonl is ~40 KB)
MAX_RECORD_BYTES = 64 * 2**20


class RunError(SchemaError):
    """A run directory that is missing, incomplete, damaged or from another version."""


class RefusedFile(RunError):
    """A record that is not a regular file inside its run directory, or too large: not read."""


def read_text(path: str | Path, within: str | Path | None = None,
              limit: int | None = None) -> str:
    """A record file's text. Refused (RefusedFile): a link that leads out of ``within`` (the
    run directory), anything but a regular file (a device, a FIFO, a folder), more than ``limit``
    bytes (default MAX_RECORD_BYTES). A missing file is a RunError "file not found"."""
    path = Path(path)
    limit = MAX_RECORD_BYTES if limit is None else limit
    if within is not None:
        real, root = path.resolve(), Path(within).resolve()
        if not real.is_relative_to(root):
            raise RefusedFile(f"{path}: a link to {real}, outside the run directory: not read")
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise RefusedFile(f"{path}: not a regular file: not read")
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise RunError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise RefusedFile(f"{path}: not a regular file: not read") from None
    except OSError as e:
        raise RunError(f"{path}: cannot read it ({e.strerror})") from None
    if len(data) > limit:
        raise RefusedFile(f"{path}: larger than {limit // 2**20} MiB: not read")
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise RunError(f"{path}: not UTF-8 text ({e})") from None


def read_json(path: Path, required: tuple[str, ...] = (),
              within: str | Path | None = None) -> dict[str, Any]:
    """A JSON object file with the ``required`` keys, or a RunError naming file and key."""
    text = read_text(path, within)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RunError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: expected a JSON object, got {type(data).__name__}")
    for key in required:
        if key not in data:
            raise RunError(f"{path}: missing field '{key}'")
    return data


def read_jsonl(path: Path, allow_partial_last: bool = True,
               within: str | Path | None = None) -> list[dict[str, Any]]:
    """Objects of a JSON-lines file; a run still writing may leave its last line incomplete."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return []
    lines = read_text(path, within).splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if allow_partial_last and i == len(lines) - 1:
                break
            raise RunError(f"{path}: line {i + 1} is not valid JSON ({e})") from None
    return rows


def read_config(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG
    config = read_json(path, CONFIG_KEYS, within=run_dir)
    if config["schema"] != RUN_SCHEMA:
        raise RunError(f"{path}: field 'schema' must be {RUN_SCHEMA!r}, got {config['schema']!r}")
    if config["version"] != RUN_VERSION:
        raise RunError(f"{path}: field 'version' is {config['version']!r}; this dnarch-deploy "
                       f"reads run version {RUN_VERSION} (written by another version?)")
    if isinstance(config["model"], dict):
        config["model"] = {**MODEL_FIELDS_BEFORE, **config["model"]}
    if isinstance(config["train"], dict):
        config["train"] = {**TRAIN_FIELDS_BEFORE, **config["train"]}
    return config


def trained_with(config: dict[str, Any]) -> dict[str, Any]:
    """The values a run trained with, from its read config.json: the search's flags, those left
    to resolve per task (``--shift``, ``--label-smoothing``, ...) as they resolved."""
    return {**config["train"], **(config.get("in_effect") or {})}


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    return read_json(Path(run_dir) / SUMMARY, SUMMARY_KEYS, within=run_dir)


def scored_as_shipped(summary: dict[str, Any]) -> bool:
    """Is the summary's test metric the shipped network's (BatchNorm calibrated on the training
    inputs)? Runs written before recorded the batch-statistics one alone (python -m
    search.rescore rescores them)."""
    return "test_metric_batch_statistics" in summary


def read_architecture(run_dir: str | Path) -> Architecture:
    path = Path(run_dir) / ARCHITECTURE
    return Architecture.from_dict(read_json(path, within=run_dir), where=str(path))


def read_architectures(run_dir: str | Path) -> list[Architecture]:
    path = Path(run_dir) / ARCHITECTURES
    return [Architecture.from_dict(row, where=f"{path} line {i + 1}")
            for i, row in enumerate(read_jsonl(path, within=run_dir))]


# --- the export report ------------------------------------------------------------------------


def read_report(run_dir: str | Path) -> dict[str, Any]:
    """RUN_DIR/export/report.json, checked against its schema; a RunError names file and field.

    The fields other tools read (export writes more: options, environment, stage seconds):

        schema, version   EXPORT_SCHEMA, EXPORT_VERSION (1 is still read: it has no "tuning" and
                          no latency "ceiling" / "achieved_gflops_by_batch")
        equivalence       {stage: {"max_abs": number, "max_rel": number}}, against the trained model
        tolerance         number: the largest max_rel the export accepted
        ops               {op type: count} in model.onnx
        backends          {backend: {"compatible": bool, "unsupported_ops": [op type, ...]}}
        latency           null (export --no-bench), or
                          {"batches": [int, ...], "layers": {name: ENTRY}, "total": ENTRY,
                           "eager": {name: {batch: ms}}}
        tuning            (version 2) {"by": "measured" | "cost" | "forced", "batches": [int, ...]
                          or null: the batches the tactics were chosen for, ...}
        latency.ceiling   (version 2) {"gflops": number: one large MatMul in onnxruntime, same
                          threads, same run; "fraction_by_batch": {batch: number}}; the total
                          also has "achieved_gflops_by_batch": {batch: number}
        ENTRY             "theoretical", "paper": MACs per sample (the lowered operators at
                          the tactics chosen; the search's cost model: the same operators at
                          the tactics chosen by cost); "measured_ms": ms at batch 1, null for a
                          layer when not measured (--no-per-layer); "measured_ms_by_batch":
                          {batch: ms};
                          layers also "tactic" (null for encoder and decoder)

    The total has a measurement at every batch in ``batches``.
    """
    path = Path(run_dir) / REPORT
    report = read_json(path, REPORT_KEYS, within=run_dir)
    check = _ReportCheck(path)
    if report["schema"] != EXPORT_SCHEMA:
        check.fail("schema", f"{EXPORT_SCHEMA!r}", report["schema"])
    if report["version"] not in EXPORT_VERSIONS_READ:
        raise RunError(f"{path}: field 'version' is {report['version']!r}; this dnarch-deploy "
                       f"reads export version {EXPORT_VERSION} (export the run again)")
    if report["version"] >= 2:
        tuning = check.mapping(report.get("tuning"), "tuning")
        batches = tuning.get("batches")
        if not (batches is None or (isinstance(batches, list) and all(
                isinstance(b, int) and not isinstance(b, bool) for b in batches))):
            check.fail("tuning.batches", "a list of batch sizes or null", batches)
    for stage, entry in check.mapping(report["equivalence"], "equivalence").items():
        for key in ("max_abs", "max_rel"):
            check.number(check.mapping(entry, f"equivalence.{stage}").get(key),
                         f"equivalence.{stage}.{key}")
    if "tolerance" in report:
        check.number(report["tolerance"], "tolerance")
    for op, count in check.mapping(report["ops"], "ops").items():
        if not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
            check.fail(f"ops.{op}", "a count", count)
    for name, entry in check.mapping(report["backends"], "backends").items():
        entry = check.mapping(entry, f"backends.{name}")
        if not isinstance(entry.get("compatible"), bool):
            check.fail(f"backends.{name}.compatible", "true or false", entry.get("compatible"))
        if not isinstance(entry.get("unsupported_ops", []), list):
            check.fail(f"backends.{name}.unsupported_ops", "a list", entry["unsupported_ops"])
    if report["latency"] is not None:
        _check_latency(check, check.mapping(report["latency"], "latency"), report["version"])
    return report


def _check_latency(check: _ReportCheck, latency: dict[str, Any], version: int) -> None:
    batches = latency.get("batches")
    if not (isinstance(batches, list) and batches
            and all(isinstance(b, int) and not isinstance(b, bool) for b in batches)):
        check.fail("latency.batches", "a list of batch sizes", batches)
    entries = {f"latency.layers.{name}": entry
               for name, entry in check.mapping(latency.get("layers"), "latency.layers").items()}
    entries["latency.total"] = latency.get("total")
    for field, entry in entries.items():
        entry = check.mapping(entry, field)
        for key in ("theoretical", "paper"):
            check.number(entry.get(key), f"{field}.{key}")
        if field == "latency.total" or entry.get("measured_ms") is not None:
            check.number(entry.get("measured_ms"), f"{field}.measured_ms")
        by_batch = check.mapping(entry.get("measured_ms_by_batch", {}),
                                 f"{field}.measured_ms_by_batch")
        for batch, ms in by_batch.items():
            check.number(ms, f"{field}.measured_ms_by_batch.{batch}")
        if field == "latency.total":
            for batch in batches:
                check.number(by_batch.get(str(batch)), f"{field}.measured_ms_by_batch.{batch}")
    if version >= 2:
        ceiling = check.mapping(latency.get("ceiling"), "latency.ceiling")
        check.number(ceiling.get("gflops"), "latency.ceiling.gflops")
        gflops = check.mapping(latency["total"].get("achieved_gflops_by_batch"),
                               "latency.total.achieved_gflops_by_batch")
        for batch in batches:
            check.number(gflops.get(str(batch)),
                         f"latency.total.achieved_gflops_by_batch.{batch}")
    for name, by_batch in check.mapping(latency.get("eager", {}), "latency.eager").items():
        for batch, ms in check.mapping(by_batch, f"latency.eager.{name}").items():
            check.number(ms, f"latency.eager.{name}.{batch}")


class _ReportCheck:
    """Type checks that raise a RunError naming the report file and the field."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, field: str, what: str, value: Any) -> None:
        got = "missing" if value is None else f"got {value!r}"
        raise RunError(f"{self.path}: field '{field}' must be {what} ({got})")

    def number(self, value: Any, field: str) -> float:
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            self.fail(field, "a number", value)
        return float(value)

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, "an object", value)
        return value


def check_run_dir(run_dir: str | Path) -> Path:
    path = Path(run_dir)
    if not path.exists():
        raise RunError(f"{path}: run directory not found")
    if not path.is_dir():
        raise RunError(f"{path}: not a directory")
    if not (path / CONFIG).exists():
        raise RunError(f"{path}: not a run directory ({CONFIG} missing)")
    return path


# --- the data a run was trained on -----------------------------------------------------------

SPLITS = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test")


def data_fingerprint(task) -> dict[str, Any]:
    """What config.json records about the data: the task's name, seed and options (the generator
    settings), a sha256 over the six arrays as loaded, and for a user's file its path and sha256."""
    digest = hashlib.sha256()
    for name in SPLITS:
        a = np.ascontiguousarray(getattr(task, name))
        digest.update(f"{name} {a.dtype.str} {a.shape}".encode())
        digest.update(memoryview(a).cast("B"))
    options = task.info.get("options", {})
    fingerprint = {"task": task.name, "seed": task.info.get("seed"),
                   "options": json.loads(json.dumps(options, default=str)),
                   "arrays_sha256": digest.hexdigest()}
    if task.info.get("file_sha256"):
        fingerprint.update(file=task.info["file"], file_sha256=task.info["file_sha256"])
    return fingerprint


def check_data(run_dir: str | Path, config: dict[str, Any], task, flag: str) -> None:
    """Refuse (RunError) data that differ from the fingerprint in config.json; ``flag`` is the
    option that allows it. Runs written before fingerprints were recorded are not checked."""
    saved = config.get("data")
    if not isinstance(saved, dict):
        return
    now = data_fingerprint(task)
    where = f"{Path(run_dir) / CONFIG}"
    if saved.get("file_sha256") and saved["file_sha256"] != now.get("file_sha256"):
        raise RunError(f"the data changed since this run was trained: {now.get('file')} has "
                       f"sha256 {now.get('file_sha256', '?')[:16]}, {where} records "
                       f"{saved['file_sha256'][:16]} (pass {flag} to use the new data anyway)")
    if saved.get("arrays_sha256") != now["arrays_sha256"]:
        raise RunError(f"the data of task {now['task']!r} changed since this run was trained: "
                       f"arrays sha256 {now['arrays_sha256'][:16]}, {where} records "
                       f"{str(saved.get('arrays_sha256'))[:16]} (pass {flag} to use the new data "
                       "anyway)")


@dataclass
class Run:
    """A trained run, loaded: the model in eval mode, its task's data and its records."""

    path: Path
    config: dict[str, Any]
    model: DNArch
    task: Task | None  # None when loaded with with_task=False
    architecture: Architecture | None
    summary: dict[str, Any] | None


def load_weights(model, path: Path) -> None:
    """Load safetensors weights into ``model``; a damaged or mismatched file is a RunError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.exists():
        raise RunError(f"{path}: checkpoint not found (did the run save one?)")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise RunError(f"{path}: damaged checkpoint ({e})") from None
    expected = model.state_dict()
    wrong = [(k, tuple(v.shape), tuple(expected[k].shape)) for k, v in state.items()
             if k in expected and v.shape != expected[k].shape]
    if wrong:
        key, have, want = wrong[0]
        raise RunError(f"{path}: checkpoint does not match the model {CONFIG} describes: "
                       f"'{key}' has shape {have} in the checkpoint but {want} by {CONFIG} "
                       f"({len(wrong)} tensor(s) differ; was {CONFIG} edited or copied from "
                       "another run?)")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RunError(f"{path}: checkpoint does not match the model {CONFIG} describes "
                       f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})")


def load_run(run_dir: str | Path, weights: str = "best", with_task: bool = True) -> Run:
    """The run's trained model (eval mode, on CPU) and its task's data.

    ``weights`` is "best" (the best validation epoch, the one summary.json reports) or "last".
    """
    from .model import DNArch, ModelConfig

    path = check_run_dir(run_dir)
    config = read_config(path)
    try:
        model = DNArch(ModelConfig(**config["model"]))
    except (TypeError, ValueError) as e:
        raise RunError(f"{path / CONFIG}: field 'model' does not describe a model ({e})") from None
    file = path / (BEST_WEIGHTS if weights == "best" else LAST_WEIGHTS)
    if weights == "best" and not file.exists():
        file = path / LAST_WEIGHTS
    load_weights(model, file)
    model.eval()
    task = None
    if with_task:
        task = load_task(config["task"], seed=config["seed"], **config.get("task_options", {}))
    architecture = read_architecture(path) if (path / ARCHITECTURE).exists() else None
    summary = read_summary(path) if (path / SUMMARY).exists() else None
    return Run(path, config, model, task, architecture, summary)

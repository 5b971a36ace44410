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
                           architecture.json, report.json (schema: :class:`records.Report`)

The file names are written down here once; config.json, summary.json and report.json are typed
records (:mod:`records`: their fields, schema versions and checks; :mod:`migrate`: earlier
versions). Every reader goes through these functions, which name the file and field when
something is wrong. Nothing here imports torch (only :func:`load_run` does), so readers of records
and inference stay light.
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

from .architecture import Architecture
from .records import (  # noqa: F401 - the run directory's schema, named here too
    EXPORT_SCHEMA,
    EXPORT_VERSION,
    EXPORT_VERSIONS_READ,
    RUN_SCHEMA,
    RUN_VERSION,
    Config,
    RefusedFile,
    Report,
    RunError,
    Summary,
)
from .tasks import Task, load_task

if TYPE_CHECKING:  # torch is imported only by load_run: reading records needs none
    from .model import DNArch

CONFIG = "config.json"
METRICS = "metrics.jsonl"
ARCHITECTURES = "architectures.jsonl"
ARCHITECTURE = "architecture.json"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
LAST_WEIGHTS = "checkpoints/model.safetensors"
BEST_WEIGHTS = "checkpoints/best.safetensors"
EXPORT = "export"

# RUN_DIR/export/: written by export (export.pipeline), read by the dashboard and export.infer
ONNX_FILE = "model.onnx"
PT2_FILE = "model.pt2"
TS_FILE = "model.ts"
AOTI_FILE = "model.aoti.pt2"
EXPORT_ARCHITECTURE_FILE = "architecture.json"
REPORT_FILE = "report.json"
REPORT = f"{EXPORT}/{REPORT_FILE}"
# the largest record file any reader takes in (a 60-epoch run's metrics.jsonl is ~40 KB)
MAX_RECORD_BYTES = 64 * 2**20


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


def read_config(run_dir: str | Path) -> Config:
    """config.json, as this version reads it (:meth:`records.Config.from_dict`)."""
    path = Path(run_dir) / CONFIG
    return Config.from_dict(read_json(path, within=run_dir), str(path))


def read_summary(run_dir: str | Path) -> Summary:
    """summary.json (:meth:`records.Summary.from_dict`)."""
    path = Path(run_dir) / SUMMARY
    return Summary.from_dict(read_json(path, within=run_dir), str(path))


def scored_as_shipped(summary: Summary) -> bool:
    """Is the summary's test metric the shipped network's (BatchNorm calibrated on the training
    inputs)? Runs written before recorded the batch-statistics one alone (python -m
    search.rescore rescores them). :attr:`records.Summary.scored_as_shipped`, for callers of
    this function."""
    return summary.scored_as_shipped


def read_report(run_dir: str | Path) -> Report:
    """RUN_DIR/export/report.json, checked against its schema (:class:`records.Report`); a
    RunError names file and field."""
    path = Path(run_dir) / REPORT
    return Report.from_dict(read_json(path, within=run_dir), str(path))


def read_export_report(export_dir: str | Path) -> Report:
    """An export directory's report.json (RUN_DIR/export, or one copied on its own), as
    :func:`read_report` reads it."""
    path = Path(export_dir) / REPORT_FILE
    return Report.from_dict(read_json(path, within=export_dir), str(path))


def read_architecture(run_dir: str | Path) -> Architecture:
    path = Path(run_dir) / ARCHITECTURE
    return Architecture.from_dict(read_json(path, within=run_dir), where=str(path))


def read_architectures(run_dir: str | Path) -> list[Architecture]:
    path = Path(run_dir) / ARCHITECTURES
    return [Architecture.from_dict(row, where=f"{path} line {i + 1}")
            for i, row in enumerate(read_jsonl(path, within=run_dir))]


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


def check_data(run_dir: str | Path, config: Config, task, flag: str) -> None:
    """Refuse (RunError) data that differ from the fingerprint in config.json; ``flag`` is the
    option that allows it. Runs written before fingerprints were recorded are not checked."""
    saved = config.data
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
    config: Config
    model: DNArch
    task: Task | None  # None when loaded with with_task=False
    architecture: Architecture | None
    summary: Summary | None


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
        model = DNArch(ModelConfig(**config.model))
    except (TypeError, ValueError) as e:
        raise RunError(f"{path / CONFIG}: field 'model' does not describe a model ({e})") from None
    file = path / (BEST_WEIGHTS if weights == "best" else LAST_WEIGHTS)
    if weights == "best" and not file.exists():
        file = path / LAST_WEIGHTS
    load_weights(model, file)
    model.eval()
    task = None
    if with_task:
        task = load_task(config.task, seed=config.seed, **(config.task_options or {}))
    architecture = read_architecture(path) if (path / ARCHITECTURE).exists() else None
    summary = read_summary(path) if (path / SUMMARY).exists() else None
    return Run(path, config, model, task, architecture, summary)

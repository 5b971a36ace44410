"""The run directory: the contract between search, export and the dashboard.

    RUN_DIR/
      config.json          resolved configuration, seed, package versions, device
      metrics.jsonl        one JSON object per logged step / epoch
      architectures.jsonl  one architecture snapshot per epoch
      architecture.json    the final architecture
      summary.json         test metric(s), complexity ratio, parameters, MACs, wall time
      checkpoints/         model.safetensors (last), best.safetensors, and epoch-NNNNN/ (the
                           newest epoch's model.safetensors and state.pt: what --resume reads)
      export/              written by export

The file names, required keys and schema version are written down here once; every reader goes
through these functions, which name the file and field when something is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
SUMMARY_KEYS = (
    "task", "learn", "metric_name", "test_metric", "complexity_ratio", "params", "macs",
    "wall_seconds",
)
REPORT_KEYS = ("equivalence", "ops", "latency", "backends")


class RunError(SchemaError):
    """A run directory that is missing, incomplete, damaged or from another version."""


def read_json(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON object file with the ``required`` keys, or a RunError naming file and key."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RunError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: expected a JSON object, got {type(data).__name__}")
    for key in required:
        if key not in data:
            raise RunError(f"{path}: missing field '{key}'")
    return data


def read_jsonl(path: Path, allow_partial_last: bool = True) -> list[dict[str, Any]]:
    """Objects of a JSON-lines file; a run still writing may leave its last line incomplete."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
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
    config = read_json(path, CONFIG_KEYS)
    if config["schema"] != RUN_SCHEMA:
        raise RunError(f"{path}: field 'schema' must be {RUN_SCHEMA!r}, got {config['schema']!r}")
    if config["version"] != RUN_VERSION:
        raise RunError(f"{path}: field 'version' is {config['version']!r}; this dnarch-deploy "
                       f"reads run version {RUN_VERSION} (written by another version?)")
    return config


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    return read_json(Path(run_dir) / SUMMARY, SUMMARY_KEYS)


def read_architecture(run_dir: str | Path) -> Architecture:
    return Architecture.load(Path(run_dir) / ARCHITECTURE)


def read_architectures(run_dir: str | Path) -> list[Architecture]:
    path = Path(run_dir) / ARCHITECTURES
    return [Architecture.from_dict(row, where=f"{path} line {i + 1}")
            for i, row in enumerate(read_jsonl(path))]


def check_run_dir(run_dir: str | Path) -> Path:
    path = Path(run_dir)
    if not path.exists():
        raise RunError(f"{path}: run directory not found")
    if not path.is_dir():
        raise RunError(f"{path}: not a directory")
    if not (path / CONFIG).exists():
        raise RunError(f"{path}: not a run directory ({CONFIG} missing)")
    return path


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
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RunError(f"{path}: checkpoint does not match the configured model "
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

"""Checkpoints: weights as safetensors, training state loadable with ``weights_only=True``.

The last checkpoint is one directory per epoch, ``checkpoints/epoch-NNNNN/`` holding
``model.safetensors`` and ``state.pt``. It is written under a temporary name, fsynced, and renamed
into place, so a run killed at any moment leaves either the previous checkpoint or the new one,
never a mix; older ones are deleted only after the new one is in place.
``checkpoints/model.safetensors`` (the last weights, for readers) and
``checkpoints/best.safetensors`` are single atomic files.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save

from dnarch_deploy import rundir as R
from dnarch_deploy.io import atomic_write_bytes, atomic_write_text

PREFIX = "epoch-"


def save_weights(model: torch.nn.Module, path: Path) -> None:
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write_bytes(path, save(state, metadata={"format": "pt"}))


def load_weights_into(model: torch.nn.Module, path: Path) -> None:
    R.load_weights(model, path)  # one loader, with the run-directory error messages


def _epoch_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / R.CHECKPOINTS
    dirs = [p for p in root.glob(PREFIX + "*") if p.is_dir() and p.name[len(PREFIX):].isdigit()]
    return sorted(dirs, key=lambda p: int(p.name[len(PREFIX):]))


def save_last(run_dir: Path, model, opt, sched, info: dict) -> None:
    root = run_dir / R.CHECKPOINTS
    root.mkdir(exist_ok=True)
    final = root / f"{PREFIX}{info['epoch']:05d}"
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_weights(model, tmp / "model.safetensors")
    state = {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        **{k: (torch.tensor(float("nan")) if v is None else v) for k, v in info.items()},
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(tmp / "state.pt", buffer.getvalue())
    shutil.rmtree(final, ignore_errors=True)  # only exists if this epoch was checkpointed before
    os.replace(tmp, final)
    _fsync_dir(root)
    save_weights(model, run_dir / R.LAST_WEIGHTS)
    for old in _epoch_dirs(run_dir)[:-1]:
        shutil.rmtree(old, ignore_errors=True)


def last_epoch(run_dir: Path) -> int | None:
    """The epoch of the newest checkpoint, None when there is none."""
    dirs = _epoch_dirs(run_dir)
    return int(dirs[-1].name[len(PREFIX):]) if dirs else None


def damaged(path: Path, error: Exception) -> R.RunError:
    """A damaged state.pt, in one line: torch.load's own message runs to a page of advice."""
    first = (str(error).splitlines() or [""])[0]
    return R.RunError(f"{path}: damaged training state ({type(error).__name__}: {first})")


def last_step(run_dir: Path) -> int:
    """The optimiser steps the newest checkpoint has trained, 0 when there is none."""
    dirs = _epoch_dirs(run_dir)
    if not dirs:
        return 0
    path = dirs[-1] / "state.pt"
    try:
        return int(torch.load(path, weights_only=True, map_location="cpu")["step"])
    except Exception as e:  # noqa: BLE001 - any failure here means a damaged or foreign file
        raise damaged(path, e) from None


def last_weights(run_dir: Path) -> Path | None:
    """The newest checkpoint's weights file, None when there is none."""
    dirs = _epoch_dirs(run_dir)
    return dirs[-1] / "model.safetensors" if dirs else None


def load_last(run_dir: Path, model, opt, sched) -> dict:
    """Restore the newest checkpoint; a damaged one is a RunError naming the file. A run that
    stopped before its first checkpoint starts again from epoch 0 (model, optimiser and RNG as
    a new run leaves them: nothing is loaded)."""
    dirs = _epoch_dirs(run_dir)
    if not dirs:
        return {"epoch": -1, "step": 0, "best": None, "best_epoch": -1, "wall_seconds": 0.0,
                "best_fits": False, "first_loss": None,
                "restarts": [], "latency_checks": []}
    last = dirs[-1]
    R.load_weights(model, last / "model.safetensors")
    path = last / "state.pt"
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        if torch.cuda.is_available() and state["cuda_rng"]:
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        info = {k: state[k] for k in ("epoch", "step", "best", "best_epoch", "wall_seconds")}
        info["best_fits"] = bool(state.get("best_fits", True))  # runs before the budget rule
        info["first_loss"] = float(state.get("first_loss", float("nan")))  # and stall checks
        info["restarts"] = list(state.get("restarts", []))
        info["latency_checks"] = list(state.get("latency_checks", []))  # and latency checks
    except Exception as e:  # noqa: BLE001 - any failure here means a damaged or foreign file
        raise damaged(path, e) from None
    if isinstance(info["best"], torch.Tensor):
        info["best"] = None if info["best"].isnan() else float(info["best"])
    return info


def clear_attempt(run_dir: Path) -> None:
    """Remove what a stalled attempt wrote (checkpoints and records); config.json stays."""
    for path in _epoch_dirs(run_dir):
        shutil.rmtree(path, ignore_errors=True)
    for name in (R.BEST_WEIGHTS, R.LAST_WEIGHTS):
        (run_dir / name).unlink(missing_ok=True)
    truncate_records(run_dir, -1)


def truncate_records(run_dir: Path, epoch: int) -> None:
    """Drop records written after the checkpoint of ``epoch`` (a run killed mid-epoch). Only the
    last line may be unreadable (cut by the kill); one before it is a RunError naming it."""
    for name in (R.METRICS, R.ARCHITECTURES):
        path = run_dir / name
        if not path.exists():
            continue
        keep = []
        lines = R.read_text(path, within=run_dir).splitlines()
        for i, line in enumerate(lines):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                if i == len(lines) - 1:
                    continue  # a line cut by the kill
                raise R.RunError(f"{path}: line {i + 1} is not valid JSON ({e}); only the last "
                                 "line may be cut short. Repair or delete that line, then "
                                 "resume") from None
            done = row.get("epoch") is not None and row["epoch"] <= epoch
            if done and row.get("split") != "test":
                keep.append(line)
        atomic_write_text(path, "".join(line + "\n" for line in keep))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

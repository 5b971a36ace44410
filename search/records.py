"""Appending and writing the run directory's JSON records (only rank 0 calls these)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from dnarch_deploy.io import atomic_write_text


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null rather than produce an unreadable file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one line and flush it to disk (a reader may be watching the file)."""
    with open(path, "a") as f:
        f.write(json.dumps(_clean(row)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(_clean(data), indent=1) + "\n")

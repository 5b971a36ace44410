"""Task names and options: "family[:arg][,key=value...]" plus keyword options."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

from .base import TaskError

T = TypeVar("T")


def split_name(name: str, takes_arg: bool) -> tuple[str | None, dict[str, str]]:
    """Split what follows "family:" into (positional argument, {key: raw value})."""
    if not name:
        return None, {}
    parts = [p.strip() for p in name.split(",")]
    arg = None
    if takes_arg and "=" not in parts[0]:
        arg, parts = parts[0], parts[1:]
    options = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise TaskError(f"task option {part!r} is not key=value (in {name!r})")
        options[key.strip()] = value.strip()
    return arg, options


def _coerce(value: Any, kind: Any, key: str, where: str) -> Any:
    """Turn a raw option value (often a string from a task name) into the field's type."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        kind = args[0]
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("1", "true", "yes")
            return bool(value)
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if kind is float:
            return float(value)
        if kind is str:
            return str(value)
    except (TypeError, ValueError):
        raise TaskError(
            f"{where}: option {key}={value!r} is not a valid {kind.__name__}"
        ) from None
    return value


def build_options(cls: type[T], options: dict[str, Any], where: str) -> T:
    """Instantiate the options dataclass `cls`, naming any unknown or badly typed option."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise TaskError(
            f"{where}: unknown option(s) {', '.join(unknown)}; accepted: {', '.join(fields)}"
        )
    values = {k: _coerce(v, hints[k], k, where) for k, v in options.items()}
    try:
        return cls(**values)
    except ValueError as err:  # __post_init__ range checks
        raise TaskError(f"{where}: {err}") from None

"""The found architecture as plain, versioned JSON (design.md "The run directory").

Written per epoch to ``architectures.jsonl`` and at the end to ``architecture.json``; read by export
and the dashboard. Reading validates every field and names the file and field that is wrong.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEMA = "dnarch-architecture"
VERSION = 1


class SchemaError(ValueError):
    """A file that does not follow the schema: the message names the file and the field."""


@dataclass
class BlockArchitecture:
    index: int  # block position in the maximum-depth network
    kernel_size: list[int]  # per axis, in input samples (odd)
    resolution: list[int]  # per axis, samples at which the block computes
    kernel_taps: list[int]  # per axis, taps actually used at that resolution (odd)
    n_in: int
    n_mid: int
    n_out: int
    depth_weight: float  # depth-mask value (1.0 when depth is not learned)


@dataclass
class Architecture:
    input_size: list[int]
    in_channels: int
    out_channels: int
    dense: bool
    learn: str
    stream_width: int
    depth: int  # blocks in use (depth-mask value >= threshold)
    blocks: list[BlockArchitecture] = field(default_factory=list)
    max_depth: int = 0
    max_width: int = 0
    epoch: int | None = None
    schema: str = SCHEMA
    version: int = VERSION

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> None:
        from .io import atomic_write_text

        atomic_write_text(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, data: object, where: str = "architecture") -> Architecture:
        _expect(isinstance(data, dict), where, "", "a JSON object")
        if data.get("schema") != SCHEMA:
            raise SchemaError(
                f"{where}: field 'schema' must be {SCHEMA!r}, got {data.get('schema')!r}"
            )
        if data.get("version") != VERSION:
            raise SchemaError(
                f"{where}: field 'version' is {data.get('version')!r}; this dnarch-deploy "
                f"reads version {VERSION} (written by another version?)"
            )
        top = {
            "input_size": _int_list,
            "in_channels": _pos_int,
            "out_channels": _pos_int,
            "dense": _bool,
            "learn": _str,
            "stream_width": _pos_int,
            "depth": _nonneg_int,
            "max_depth": _nonneg_int,
            "max_width": _nonneg_int,
        }
        kwargs = {k: _field(data, k, check, where) for k, check in top.items()}
        epoch = data.get("epoch")
        _expect(epoch is None or _nonneg_int(epoch), where, "epoch", "null or an integer >= 0")
        blocks = _field(data, "blocks", lambda v: isinstance(v, list), where)
        block_fields = {
            "index": _nonneg_int,
            "kernel_size": _int_list,
            "resolution": _int_list,
            "kernel_taps": _int_list,
            "n_in": _pos_int,
            "n_mid": _pos_int,
            "n_out": _pos_int,
            "depth_weight": _number,
        }
        parsed = []
        for i, block in enumerate(blocks):
            _expect(isinstance(block, dict), where, f"blocks[{i}]", "a JSON object")
            parsed.append(
                BlockArchitecture(
                    **{
                        k: _field(block, k, check, where, f"blocks[{i}].")
                        for k, check in block_fields.items()
                    }
                )
            )
        _expect(
            len(parsed) == kwargs["depth"], where, "depth", f"the number of blocks ({len(parsed)})"
        )
        return cls(**kwargs, blocks=parsed, epoch=epoch)

    @classmethod
    def load(cls, path: str | Path) -> Architecture:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise SchemaError(f"{path}: file not found") from None
        except json.JSONDecodeError as e:
            raise SchemaError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(data, where=str(path))


def _field(data: dict, key: str, check, where: str, prefix: str = ""):
    if key not in data:
        raise SchemaError(f"{where}: missing field '{prefix}{key}'")
    value = data[key]
    _expect(check(value), where, prefix + key, check.__doc__ or "a valid value", value)
    return value


def _expect(ok: bool, where: str, key: str, what: str, value: object = None) -> None:
    if not ok:
        got = f", got {value!r}" if value is not None else ""
        raise SchemaError(f"{where}: field '{key}' must be {what}{got}")


def _pos_int(v) -> bool:
    """an integer >= 1"""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _nonneg_int(v) -> bool:
    """an integer >= 0"""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _int_list(v) -> bool:
    """a list of 1 or 2 integers >= 1"""
    return isinstance(v, list) and len(v) in (1, 2) and all(_pos_int(x) for x in v)


def _bool(v) -> bool:
    """true or false"""
    return isinstance(v, bool)


def _str(v) -> bool:
    """a string"""
    return isinstance(v, str)


def _number(v) -> bool:
    """a number in [0, 1]"""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0


def describe(model, epoch: int | None = None) -> Architecture:
    """The architecture a DNArch model's masks describe right now."""
    import torch

    c = model.config
    with torch.no_grad():
        plan = model.plan()
    blocks = [
        BlockArchitecture(
            index=p.index,
            kernel_size=list(p.kernel_size),
            resolution=list(p.resolution),
            kernel_taps=[2 * h + 1 for h in p.half_taps],
            n_in=p.n_in,
            n_mid=p.n_mid,
            n_out=p.n_out,
            depth_weight=1.0 if p.depth_weight is None else round(float(p.depth_weight), 6),
        )
        for p in plan.blocks
    ]
    return Architecture(
        input_size=list(c.input_size),
        in_channels=c.in_channels,
        out_channels=c.out_channels,
        dense=c.dense,
        learn=c.learn,
        stream_width=plan.stream,
        depth=len(blocks),
        blocks=blocks,
        max_depth=c.max_depth,
        max_width=c.max_width,
        epoch=epoch,
    )

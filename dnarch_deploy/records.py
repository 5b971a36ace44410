"""The run directory's JSON records as typed dataclasses: config.json (:class:`Config`),
summary.json (:class:`Summary`) and export/report.json (:class:`Report`).

A writer builds a record and writes its :meth:`Record.to_dict`; a reader (:mod:`rundir`'s
``read_config``, ``read_summary``, ``read_report``) returns one, built by ``from_dict``, which
checks the file (a :class:`RunError` naming the file and the field) and applies the migration of
its version (:mod:`migrate`). A record's fields are the file's keys in the order they are written.
A field a file need not have is None when it is absent, and a None one is not written (a required
field always is), so what a writer writes reads back equal. Nested values (the model's fields, the
latency tables) stay JSON objects, checked where the record is read. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, NoReturn

from .architecture import SchemaError
from .migrate import CONFIG_MIGRATIONS, summary_v1

RUN_SCHEMA = "dnarch-run"
RUN_VERSION = 1

# RUN_DIR/export/: written by export (export.pipeline), read by the dashboard and export.infer
EXPORT_SCHEMA = "dnarch-export"
# 2: "tuning" (the batches tactics were chosen for), latency "ceiling"; 3: latency "paper" is the
# search's cost model of the deployed network (before: appendix C's figure, resampling left out)
EXPORT_VERSION = 3
EXPORT_VERSIONS_READ = (1, 2, 3)  # version 1 reports (no tuning, no ceiling) still read

NOT_WRITTEN = {"written": False}  # a field's metadata: derived on read, not in the file


class RunError(SchemaError):
    """A run directory that is missing, incomplete, damaged or from another version."""


class RefusedFile(RunError):
    """A record that is not a regular file inside its run directory, or too large: not read."""


class Check:
    """Type checks that raise a RunError naming the file (``where``) and the field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field: str, what: str, value: Any) -> NoReturn:
        got = "missing" if value is None else f"got {value!r}"
        raise RunError(f"{self.where}: field '{field}' must be {what} ({got})")

    def number(self, value: Any, field: str) -> float:
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            self.fail(field, "a number", value)
        return float(value)

    def integer(self, value: Any, field: str) -> int:
        if not (isinstance(value, int) and not isinstance(value, bool)):
            self.fail(field, "an integer", value)
        return value

    def text(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            self.fail(field, "a string", value)
        return value

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, "an object", value)
        return value


@dataclass(kw_only=True)
class Record:
    """A JSON record of the run directory. Dict-style access (``record["test_metric"]``,
    ``record.get("base_ms", [])``) reads the fields, for callers written when readers returned
    dicts; new code reads the attributes."""

    @classmethod
    def required(cls) -> tuple[str, ...]:
        """The keys every file of this record has (the fields without a default)."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("required", False))

    def to_dict(self) -> dict[str, Any]:
        """The file's content: every field in order, but those not written and optional ones
        that are None."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.metadata.get("written", True)
                and (getattr(self, f.name) is not None or f.metadata.get("required", False))}

    @classmethod
    def _require(cls, data: dict[str, Any], where: str) -> Check:
        """A RunError naming the first required key ``data`` lacks; else a Check for the rest."""
        for key in cls.required():
            if key not in data:
                raise RunError(f"{where}: missing field '{key}'")
        return Check(where)

    @classmethod
    def _build(cls, data: dict[str, Any]):
        """The record of ``data``'s known keys (others, from other versions, are left out)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def __getitem__(self, key: str) -> Any:
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def keys(self):
        """The file's keys: with ``[]``, what ``dict(record)`` and ``{**record}`` read."""
        return self.to_dict().keys()

    def __contains__(self, key: object) -> bool:
        """Whether the file has ``key`` (as the dict a reader returned had it)."""
        return key in self.to_dict()

    def get(self, key: str, default: Any = None) -> Any:
        """The field, or ``default`` where it is None (absent from the file) or no field."""
        value = self[key] if key in {f.name for f in fields(self)} else None
        return default if value is None else value


def required_field() -> Any:
    """A field every file has (no default: a writer gives it, a reader refuses a file without)."""
    return field(metadata={"required": True})


@dataclass(kw_only=True)
class Config(Record):
    """config.json: the resolved configuration, seed, package versions, device. The fields after
    ``train`` are None in runs written before they were recorded."""

    schema: str = required_field()  # RUN_SCHEMA
    version: int = required_field()  # RUN_VERSION
    task: str = required_field()
    task_options: dict[str, Any] | None = None  # the task loader's options (None: {})
    seed: int = required_field()
    model: dict[str, Any] = required_field()  # ModelConfig's fields
    train: dict[str, Any] = required_field()  # the search's flags as typed (SearchConfig's fields)
    in_effect: dict[str, float] | None = None  # those resolved per task, as they resolved
    device: str | None = None
    world_size: int | None = None
    base_macs: float | None = None
    target_macs: float | None = None
    cost_unit: str | None = None
    base_cost: float | None = None  # the base's cost in cost_unit
    data: dict[str, Any] | None = None  # rundir.data_fingerprint
    versions: dict[str, str] | None = None
    command: list[str] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> Config:
        """The record of config.json's ``data`` (``where``: its path), migrated from its run
        version; a RunError names the file and the field (or the removed option it used)."""
        check = cls._require(data, where)
        if data["schema"] != RUN_SCHEMA:
            raise RunError(f"{where}: field 'schema' must be {RUN_SCHEMA!r}, got "
                           f"{data['schema']!r}")
        version = data["version"]
        migration = CONFIG_MIGRATIONS.get(version) if isinstance(version, int) else None
        if migration is None:
            raise RunError(f"{where}: field 'version' is {data['version']!r}; this dnarch-deploy "
                           f"reads run version {RUN_VERSION} (written by another version?)")
        check.text(data["task"], "task")
        check.integer(data["seed"], "seed")
        check.mapping(data["model"], "model")
        check.mapping(data["train"], "train")
        data, refusal = migration(data, where)
        if refusal:
            raise RunError(refusal)
        return cls._build(data)

    def trained_with(self) -> dict[str, Any]:
        """The values the run trained with: the search's flags, those left to resolve per task
        (``--shift``, ``--label-smoothing``, ...) as they resolved."""
        return {**self.train, **(self.in_effect or {})}


@dataclass(kw_only=True)
class Summary(Record):
    """summary.json: the result's test metric(s), complexity ratio, parameters, MACs, wall time.
    The optional fields are None in runs written before they were recorded."""

    task: str = required_field()
    learn: str = required_field()
    metric_name: str = required_field()
    # the shipped network's (BatchNorm calibrated on the training inputs) where scored_as_shipped,
    # else the batch-statistics one; null in the file when not finite
    test_metric: float | None = required_field()
    test_loss: float | None = None
    # BatchNorm on each test batch's statistics, as validation is scored
    test_metric_batch_statistics: float | None = None
    test_loss_batch_statistics: float | None = None
    best_epoch: int | None = None
    complexity_ratio: float = required_field()
    budget: float | None = None
    cost_unit: str | None = None
    target: float | None = None
    target_macs: float | None = None
    within_budget: bool | None = None
    max_params: int | None = None
    params: int = required_field()
    search_params: int | None = None
    macs: float = required_field()
    wall_seconds: float = required_field()
    steps: int | None = None
    restarts: list[dict[str, Any]] | None = None
    base_ms: list[float] | None = None
    latency_checks: list[dict[str, Any]] | None = None
    higher_is_better: bool | None = None
    vs_base: dict[str, Any] | None = None
    # False for a summary from before the shipped test metric (migrate.summary_v1)
    scored_as_shipped: bool = field(default=True, metadata=NOT_WRITTEN)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> Summary:
        """The record of summary.json's ``data`` (``where``: its path); a RunError names the file
        and the field."""
        check = cls._require(data, where)
        for key in ("task", "learn", "metric_name"):
            check.text(data[key], key)
        if data["test_metric"] is not None:
            check.number(data["test_metric"], "test_metric")
        for key in ("complexity_ratio", "macs", "wall_seconds"):
            check.number(data[key], key)
        check.integer(data["params"], "params")
        return cls._build(summary_v1(data))


@dataclass(kw_only=True)
class Report(Record):
    """export/report.json, checked against its schema on read. The fields other tools read
    (export writes more: run, artifacts, options, environment, stage seconds):

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

    schema: str = required_field()  # EXPORT_SCHEMA
    version: int = required_field()  # EXPORT_VERSION; older ones in EXPORT_VERSIONS_READ
    run: dict[str, Any] | None = None  # the run exported: path, task, seed
    tactics: list[str] | None = None  # per block
    tuning: dict[str, Any] | None = None
    whole_network: dict[str, Any] | None = None  # the whole-network tuning evidence, if any
    equivalence: dict[str, dict[str, float]] = required_field()
    tolerance: float | None = None
    ops: dict[str, int] = required_field()
    backends: dict[str, dict[str, Any]] = required_field()
    latency: dict[str, Any] | None = required_field()
    artifacts: list[str] | None = None
    options: dict[str, Any] | None = None
    seconds: dict[str, float] | None = None  # per export stage
    environment: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> Report:
        """The record of report.json's ``data`` (``where``: its path), checked field by field;
        a RunError names the file and the field."""
        check = cls._require(data, where)
        if data["schema"] != EXPORT_SCHEMA:
            check.fail("schema", f"{EXPORT_SCHEMA!r}", data["schema"])
        if not (isinstance(data["version"], int) and data["version"] in EXPORT_VERSIONS_READ):
            raise RunError(f"{where}: field 'version' is {data['version']!r}; this dnarch-deploy "
                           f"reads export version {EXPORT_VERSION} (export the run again)")
        if data["version"] >= 2:
            batches = check.mapping(data.get("tuning"), "tuning").get("batches")
            if not (batches is None or _batch_sizes(batches, empty=True)):
                check.fail("tuning.batches", "a list of batch sizes or null", batches)
        for stage, entry in check.mapping(data["equivalence"], "equivalence").items():
            for key in ("max_abs", "max_rel"):
                check.number(check.mapping(entry, f"equivalence.{stage}").get(key),
                             f"equivalence.{stage}.{key}")
        if "tolerance" in data:
            check.number(data["tolerance"], "tolerance")
        for op, count in check.mapping(data["ops"], "ops").items():
            if not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
                check.fail(f"ops.{op}", "a count", count)
        for name, entry in check.mapping(data["backends"], "backends").items():
            entry = check.mapping(entry, f"backends.{name}")
            if not isinstance(entry.get("compatible"), bool):
                check.fail(f"backends.{name}.compatible", "true or false", entry.get("compatible"))
            if not isinstance(entry.get("unsupported_ops", []), list):
                check.fail(f"backends.{name}.unsupported_ops", "a list", entry["unsupported_ops"])
        if data["latency"] is not None:
            _check_latency(check, check.mapping(data["latency"], "latency"), data["version"])
        return cls._build(data)


def _batch_sizes(value: Any, empty: bool = False) -> bool:
    return (isinstance(value, list) and (empty or bool(value))
            and all(isinstance(b, int) and not isinstance(b, bool) for b in value))


def _check_latency(check: Check, latency: dict[str, Any], version: int) -> None:
    batches = latency.get("batches")
    if not _batch_sizes(batches):
        check.fail("latency.batches", "a list of batch sizes", batches)
    entries = {f"latency.layers.{name}": entry
               for name, entry in check.mapping(latency.get("layers"), "latency.layers").items()}
    entries["latency.total"] = latency.get("total")
    for name, entry in entries.items():
        entry = check.mapping(entry, name)
        for key in ("theoretical", "paper"):
            check.number(entry.get(key), f"{name}.{key}")
        if name == "latency.total" or entry.get("measured_ms") is not None:
            check.number(entry.get("measured_ms"), f"{name}.measured_ms")
        by_batch = check.mapping(entry.get("measured_ms_by_batch", {}),
                                 f"{name}.measured_ms_by_batch")
        for batch, ms in by_batch.items():
            check.number(ms, f"{name}.measured_ms_by_batch.{batch}")
        if name == "latency.total":
            for batch in batches:
                check.number(by_batch.get(str(batch)), f"{name}.measured_ms_by_batch.{batch}")
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

"""Run directories written by earlier versions, read by this one.

One migration function per record and schema version, applied on read by :mod:`records` (and
:mod:`architecture`) before a record is built; each returns a new dict, the file as this version
reads it:

- config.json, run version 1 (:func:`config_v1`): the fields added after version 1 was first
  written get the values those runs trained with; the options since removed (their screens lost,
  docs/benchmark_record.md) are dropped when a run used them at their old default, and refused in
  one line naming the option and the last commit that supports it otherwise.
- summary.json, the run's version 1 (:func:`summary_v1`): a summary from before the shipped test
  metric reads with ``scored_as_shipped`` false.
- export/report.json: versions 1 and 2 need none. Version 1 has no ``tuning`` and no latency
  ceiling (they read as absent); version 2's latency "paper" figure was appendix C's, which the
  dashboard says by the report's version.
- architecture.json and architectures.jsonl: the removed options they recorded
  (:data:`REMOVED_ARCHITECTURE`, dropped or refused as above).
"""

from __future__ import annotations

from typing import Any

# The last commit whose code trains, exports and loads the removed options below.
LAST_COMMIT = "349ea12"

# Removed options: field -> the value that loads as if the option had never existed.
REMOVED = {
    "mask_data": "train",
    "mixup": 0.0,
    "initial_kernel": 0,
    "kernel_floor": 0.0,
    "kernel_decay": 0.0,
    "block_output": "pointwise",
    "block_norm": "input",
    "lam_ramp": 0.0,  # now the constant 0: lambda at full weight from the first step
    "embed_dim": 16,  # now the constant search.config.EMBED_DIM
}


# The removed options an architecture file recorded (architecture.json, architectures.jsonl).
REMOVED_ARCHITECTURE = ("block_output",)


def removed_option(field: str, value: Any, where: str) -> str:
    """The one-line refusal of a file written with a removed option at another value."""
    flag = "--" + field.replace("_", "-")
    return (f"{where}: written with {flag} {value!r}, an option removed after commit "
            f"{LAST_COMMIT} (its screen lost: docs/benchmark_record.md); load it with that "
            f"commit, or search again")


def drop_removed(section: dict[str, Any], where: str) -> str | None:
    """Delete the removed options from a config section in place; the refusal message for the
    first one at a value other than its old default, else None."""
    refusal = None
    for field, default in REMOVED.items():
        if field in section:
            value = section.pop(field)
            if value != default and refusal is None:
                refusal = removed_option(field, value, where)
    return refusal


def _filled(section: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """``section`` (a new dict, its keys in their order) with the fields it lacks from
    ``before`` appended."""
    return {**section, **{k: v for k, v in before.items() if k not in section}}


def config_v1(config: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
    """config.json of run version 1 as this version reads it, and the refusal message of a
    removed option used at another value (None: none). ``config["model"]`` and
    ``config["train"]`` are objects (the reader checked them)."""
    model = _filled(config["model"], {
        # ModelConfig fields added since: a file without one trained with
        "sample_floor": 1e-3,  # input_norm="sample" variance floor
        "pool": "avg",  # the global decoder read the channels' means only
    })
    # The search's flags, the same: a resumed run must continue as it began, and the sweep
    # compares every flag, so a missing one would read as a changed one.
    train = _filled(config["train"], {
        "pool": "avg",
        "label_smoothing": 0.0,
        "crop_min_length": 0,  # R was learned on every input
        "crop_min_budget": 0.0,  # and at every budget
        "jitter": 0.0,
        "base_ms": [],  # --cost latency priced the base from the table
    })
    refusals = [drop_removed(model, f"{where} field 'model'"),
                drop_removed(train, f"{where} field 'train'")]
    return {**config, "model": model, "train": train}, next(filter(None, refusals), None)


# The field summary.json has had since its test metric is the shipped network's.
SHIPPED_SCORES = "test_metric_batch_statistics"


def summary_v1(summary: dict[str, Any]) -> dict[str, Any]:
    """summary.json of run version 1 as this version reads it: ``scored_as_shipped`` is whether
    its ``test_metric`` is the shipped network's (BatchNorm calibrated on the training inputs).
    Before :data:`SHIPPED_SCORES` was written it was the batch-statistics figure. Rescoring such a
    run needs its weights and data, which reading records does not load (nor torch): that is
    ``python -m search.rescore``, which a job reusing the run runs (search.jobs)."""
    return {**summary, "scored_as_shipped": SHIPPED_SCORES in summary}


# config.json's migration by run version (every version a reader accepts has one).
CONFIG_MIGRATIONS = {1: config_v1}

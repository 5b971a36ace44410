"""Task names -> loaders. Family modules are imported on first use, so importing
dnarch_deploy.tasks stays light (no scipy until a generator runs)."""

from __future__ import annotations

import importlib
from pathlib import Path

from .base import Task, TaskError
from .options import split_name

# family -> (module, takes a positional argument after "family:")
FAMILIES = {
    "ucr": ("ucr", True),
    "mnist5k": ("images", False),
    "smnist5k": ("images", False),
    "digits": ("images", False),
    "mnist1d": ("mnist1d", False),
    "listops": ("listops", False),
    "pathfinder": ("pathfinder", False),
    "pathfinder1d": ("pathfinder", False),
    "darcy": ("darcy", False),
    "npz": ("npz", True),
}
GENERATED = ("mnist1d", "listops", "pathfinder", "pathfinder1d", "darcy")
NOT_DATA = ("workers",)  # options that never change the data, left out of canonical names


def _module(family: str):
    return importlib.import_module(f"{__package__}.{FAMILIES[family][0]}")


def parse_name(name: str) -> tuple[str, str | None, dict[str, str]]:
    """"family[:arg][,key=value...]" -> (family, arg, options). npz takes the rest as a path."""
    if not isinstance(name, str) or not name.strip():
        raise TaskError(f"task name must be a non-empty string, got {name!r}")
    family, _, rest = name.strip().partition(":")
    if family not in FAMILIES:
        raise TaskError(f"unknown task {name!r}; known: {', '.join(list_tasks())}")
    if family == "npz":  # a path may contain commas and '=': no options in the name
        return family, rest or None, {}
    arg, options = split_name(rest, FAMILIES[family][1])
    return family, arg, options


def canonical_name(family: str, arg: str | None, options: dict) -> str:
    """The name that reloads the same task: family[:arg] plus the options given, sorted."""
    head = f"{family}:{arg}" if arg else family
    options = {k: v for k, v in options.items() if k not in NOT_DATA}
    if family == "npz" or not options:
        return head
    tail = ",".join(f"{k}={options[k]}" for k in sorted(options))
    return f"{head}:{tail}" if not arg else f"{head},{tail}"


def load_task(
    name: str, seed: int = 0, cache_dir: str | Path | None = None, **options
) -> Task:
    """Load (or generate and cache) a task. Options come from the name and from keywords,
    keywords winning: load_task("darcy:size=43", n_train=200). Raises TaskError for anything
    a user can get wrong."""
    family, arg, name_options = parse_name(name)
    opts = {**name_options, **options}
    module = _module(family)
    if family == "ucr":
        task = module.load(arg, seed, cache_dir, opts)
    elif family == "npz":
        task = module.load(arg, seed, opts)
    elif family in ("mnist5k", "smnist5k"):
        task = module.load_mnist(family, seed, opts)
    elif family == "digits":
        task = module.load_digits(seed, opts)
    elif family in ("pathfinder", "pathfinder1d"):
        task = module.load(family, seed, cache_dir, opts)
    else:
        task = module.load(seed, cache_dir, opts)
    task.name = canonical_name(family, arg, opts)
    task.info["seed"] = seed
    return task


def list_tasks() -> list[str]:
    """Every loadable task name (bundled UCR sets found on this machine included), then the
    npz pattern."""
    ucr = importlib.import_module(f"{__package__}.ucr")
    names = [f"ucr:{n}" for n in ucr.available_sets()]
    names += [f for f in FAMILIES if f not in ("ucr", "npz")]
    return names + ["npz:PATH"]


def describe(name: str, seed: int = 0, cache_dir: str | Path | None = None, **options) -> dict:
    """Kind, input shape, outputs, sizes, metric and cache state of a task. Generated tasks are
    described from their options (nothing is generated); bundled ones are read."""
    family, arg, name_options = parse_name(name)
    opts = {**name_options, **options}
    if family in GENERATED:
        module = _module(family)
        if family.startswith("pathfinder"):
            row = module.describe(family, seed, cache_dir, opts)
        else:
            row = module.describe(seed, cache_dir, opts)
    else:
        task = load_task(name, seed, cache_dir, **options)
        shape = task.spatial if task.tokens else (task.in_channels, *task.spatial)
        row = {"kind": task.kind, "input": str(shape), "out": task.out_channels,
               "sizes": task.sizes(), "metric": task.metric_name,
               "cache": "user file" if family == "npz" else "bundled"}
    return {"name": canonical_name(family, arg, opts), **row}

"""What every benchmark shares: its command line, the header of its report, the writing of the
report, and running searches a few at a time.

- :func:`parser` and the ``add_*`` functions: the options the scripts have in common;
- :func:`command`: the command as a report shows it, ``python -m benchmarks.NAME ARGS``, with
  this machine's directories in the arguments replaced by placeholders (:func:`portable`);
- :func:`header`: the report's Command, Machine and Versions lines;
- :func:`check_report` before any work, :func:`publish` at the end: print the report and write
  it atomically;
- :func:`run_jobs`: searches (:func:`search.jobs.execute`: run, resumed or reused) and other
  jobs, a few at a time;
- :func:`fmt` (mean ± std) and :func:`code_state` (the code the runs executed).

Every script runs from the repository's root as ``python -m benchmarks.NAME``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from importlib import metadata
from pathlib import Path

from dnarch_deploy.io import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ORT = ("torch", "onnxruntime")  # the versions a report of onnxruntime timings names


# --- the command line -----------------------------------------------------------------------------


def parser(doc: str, **kwargs) -> argparse.ArgumentParser:
    """A benchmark's parser, described by its docstring's first paragraph."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0], **kwargs)


def results_file(script: str) -> Path:
    """``benchmarks/results/NAME.md`` of a script (its ``__file__``)."""
    return RESULTS / f"{Path(script).stem}.md"


def add_report(p: argparse.ArgumentParser, script: str | None = None, flag: str = "--out") -> None:
    """``flag``: the markdown file the report goes to; with ``script`` (its ``__file__``) by
    default its results file, else written only when given."""
    if script is None:
        p.add_argument(flag, type=Path, help="also write the report here (markdown)")
    else:
        default = results_file(script)
        p.add_argument(flag, type=Path, default=default, help="markdown file to write (default: "
                       f"{default.relative_to(ROOT)})")


def add_quick(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--quick", action="store_true", help=what)


def add_onnxruntime(p: argparse.ArgumentParser, repeats: int, per: str = "form",
                    batch_flag: str = "--batches", quick: str | None = None) -> None:
    """--threads, the batches (--batches or --batch) and --repeats of a script that times forms
    in onnxruntime, in turns; with ``quick`` (what it does) --quick too."""
    from export.timing import batch_sizes

    if quick is not None:
        add_quick(p, quick)
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    p.add_argument(batch_flag, type=batch_sizes, default=(1, 32),
                   help="batch sizes, comma-separated (default: 1,32)")
    p.add_argument("--repeats", type=int, default=repeats,
                   help=f"timed calls per {per} (medians)")


def add_jobs(p: argparse.ArgumentParser, seeds: int, what: str = "runs") -> None:
    """--seeds and --jobs of a script that trains: seeds 0..N-1, ``what`` at a time."""
    p.add_argument("--seeds", type=int, default=seeds, help="seeds 0..N-1 of every model")
    p.add_argument("--jobs", type=int, default=2, help=f"{what} at a time (one thread each)")


def add_searches(p: argparse.ArgumentParser, script: str, out: str, seeds: int = 3) -> None:
    """The options of a script that runs searches into run directories (:func:`run_jobs`): --out
    (where they go), --seeds, --jobs, --extra (more search.run flags), --results (the report)."""
    p.add_argument("--out", default=out, help="where the run directories go")
    add_jobs(p, seeds)
    p.add_argument("--extra", default="", help="more search.run flags for every run, for "
                   "ablations (use another --out), e.g. --extra='--tau-width 50'")
    add_report(p, script, "--results")


def at_least_one(p: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """One parser error for the first of ``names`` (attributes of ``args``) below 1."""
    for name in names:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


def arguments(argv: Sequence[str] | None) -> list[str]:
    """The arguments a script was given: ``argv``, else the process's."""
    return list(sys.argv[1:] if argv is None else argv)


# --- the report's header --------------------------------------------------------------------------


def portable(arg: str) -> str:
    """``arg`` without this machine's directories: a path in the repository made relative to it,
    one in the temporary directory written OUT/..., one in the home ~/... ."""
    temp = Path(tempfile.gettempdir())
    places = [(ROOT, "."), (temp, "OUT"), (temp.resolve(), "OUT"), (Path.home(), "~")]
    for directory, placeholder in places:
        if directory == Path(directory.anchor):  # "/" holds everything: no placeholder
            continue
        pattern = r"(?<![\w./~-])" + re.escape(str(directory)) + r"(/|(?![\w.-]))"
        arg = re.sub(pattern, lambda m, p=placeholder: "" if p == "." and m.group(1) else
                     p + m.group(1), arg)
    return arg


def command(script: str, argv: Sequence[str]) -> str:
    """``python -m benchmarks.NAME ARGS`` of a script (its ``__file__``), each argument
    :func:`portable`, as a shell would take it."""
    return shlex.join(["python", "-m", f"benchmarks.{Path(script).stem}",
                       *map(portable, argv)])


def machine() -> str:
    """This machine: its CPU model, logical CPUs and system."""
    from dnarch_deploy.latency import machine as this

    m = this()
    return f"{m['cpu']}, {m['cpu_count']} logical CPUs, {platform.system()} {platform.release()}"


def versions(*packages: str) -> str:
    """Python's version and those of the ``packages`` named, as installed ("none" where not)."""
    found = [f"Python {platform.python_version()}"]
    for name in packages:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} none")
    return ", ".join(found)


def header(script: str, argv: Sequence[str], packages: Sequence[str] = ("torch",), *,
           command_note: str = "", machine_note: str = "", versions_note: str = "") -> list[str]:
    """The lines a report starts with, each ending in a markdown line break: the command
    (:func:`command`, then ``command_note``), the machine (:func:`machine`, then
    ``machine_note``) and the versions (:func:`versions` of ``packages``, then
    ``versions_note``)."""
    return [f"Command: `{command(script, argv)}`{command_note}  ",
            f"Machine: {machine()}{machine_note}.  ",
            f"Versions: {versions(*packages)}{versions_note}.  "]


def print_header(script: str, argv: Sequence[str], packages: Sequence[str] = ("torch",),
                 **notes: str) -> None:
    """:func:`header` printed, then a blank line: the start of a report that is only printed."""
    print("\n".join(header(script, argv, packages, **notes)) + "\n")


def code_state() -> str:
    """The commit, and one digest of the Python files the runs execute (dnarch_deploy/, search/;
    committed or not), so a later reader can tell whether the code has changed since."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=ROOT, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = "unknown"
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("dnarch_deploy/**/*.py"), *ROOT.glob("search/**/*.py")]):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return f"git HEAD {head}; sha256 of dnarch_deploy/ and search/ *.py {digest.hexdigest()[:12]}"


def slug(name: str) -> str:
    """A task's name as part of a directory's: every run of other characters one "-"."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")


def utc(seconds: float | None = None) -> str:
    """A time (now by default) as reports and invocation records write it."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def fmt(values: Sequence[float], digits: int = 3) -> str:
    """mean ± std of ``values`` (one value alone, – for none)."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


# --- writing the report ---------------------------------------------------------------------------


def check_report(p: argparse.ArgumentParser, path: str | Path, flag: str = "--out",
                 make_folder: bool = True) -> Path:
    """``path`` before any work: not a directory, in a folder (made here unless ``make_folder`` is
    False) where a file can be created; else one parser error."""
    path = Path(path)
    try:
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a directory")
        if make_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.parent.is_dir():
            raise FileNotFoundError(f"directory {path.parent} does not exist")
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        p.error(f"{flag} {path}: cannot write a report there ({e.strerror or e})")
    return path


def publish(text: str, path: str | Path | None) -> None:
    """Print the report; with a ``path``, also write it there (its folder made, the file replaced
    whole: a reader never sees half a report)."""
    print(text)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        print(f"wrote {path}", file=sys.stderr)


# --- running searches -----------------------------------------------------------------------------


def run_jobs(runs: list, jobs: int, timings: dict, others: dict | None = None,
             after: Callable[[object, object], None] | None = None) -> tuple[dict, dict]:
    """Every search of ``runs`` (search.jobs.Run; :func:`search.jobs.execute`: run, resumed or
    reused, ``timings`` its seconds) and every other job (``others``: key -> (function, *args)),
    ``jobs`` at a time in threads (each search a process of its own), a progress bar over the
    searches. Returns (results, failures), keyed by a search's run directory or a job's key; a
    failure is printed and the others go on. ``after(key, value or exception)`` runs in this
    thread as each finishes."""
    from tqdm import tqdm

    from search.jobs import execute

    results, failed = {}, {}
    with ThreadPoolExecutor(jobs) as pool, tqdm(total=len(runs), desc="runs",
                                                 disable=bool(os.environ.get("CI"))) as bar:
        futures = {pool.submit(execute, run, timings): run.run_dir for run in runs}
        futures |= {pool.submit(job, *args): key for key, (job, *args) in (others or {}).items()}
        for future in as_completed(futures):
            key = futures[future]
            try:
                results[key] = outcome = future.result()
            except Exception as e:  # noqa: BLE001 - report every failure, keep the others
                failed[key] = outcome = e
                print(f"FAILED {key.name if isinstance(key, Path) else key}: {e}", file=sys.stderr)
            if isinstance(key, Path):
                bar.update(1)
            if after is not None:
                after(key, outcome)
    return results, failed

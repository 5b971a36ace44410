"""The library sits below the applications: nothing in dnarch_deploy imports search, export or
dashboard, not even lazily inside a function."""

from __future__ import annotations

import ast
import subprocess
import sys
import typing
from pathlib import Path

import dnarch_deploy

APPLICATIONS = ("search", "export", "dashboard")
LIBRARY = Path(dnarch_deploy.__file__).parent


def imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports anywhere in its body (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_library_module_imports_an_application():
    files = sorted(LIBRARY.rglob("*.py"))
    assert len(files) > 20  # the task loaders are part of the library
    offenders = {str(f.relative_to(LIBRARY)): sorted(imported_packages(f) & set(APPLICATIONS))
                 for f in files}
    assert {f: p for f, p in offenders.items() if p} == {}


def test_loading_the_library_loads_no_application():
    code = ("import sys, dnarch_deploy, dnarch_deploy.rundir, dnarch_deploy.tasks\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{APPLICATIONS!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_reading_records_and_running_an_export_need_no_torch():
    """The run directory's records and schema, the task loaders and onnxruntime inference
    (export.infer) import no torch: torch is loaded with the model."""
    code = ("import sys, dnarch_deploy, dnarch_deploy.rundir, dnarch_deploy.tasks, export.infer\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_run_fields_are_typed_by_the_library():
    from dnarch_deploy import DNArch, Run
    from dnarch_deploy.tasks import Task

    hints = typing.get_type_hints(Run, localns={"DNArch": DNArch})  # DNArch: a lazy import
    assert hints["model"] is DNArch
    assert hints["task"] == Task | None


def test_no_application_imports_another():
    """search, export and dashboard meet only in the library and the run directory."""
    root = LIBRARY.parent
    offenders = {}
    for app in APPLICATIONS:
        for f in sorted((root / app).rglob("*.py")):
            others = imported_packages(f) & (set(APPLICATIONS) - {app})
            if others:
                offenders[str(f.relative_to(root))] = sorted(others)
    assert offenders == {}

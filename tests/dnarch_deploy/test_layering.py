"""The import floors: dnarch_deploy < export < search, the dashboard on the library alone. Nothing
imports back into a module that imports it: no cycle among the project's modules, lazy imports
inside functions included (imports under ``if TYPE_CHECKING:`` are not run, and do not count)."""

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


# what each application may import of the others (the library is below them all)
ALLOWED = {"search": {"export"}, "export": set(), "dashboard": set()}
PACKAGES = ("dnarch_deploy", *APPLICATIONS)


def test_applications_import_only_what_is_below_them():
    """search may call export's functions in-process (to time the network its masks describe);
    export never imports search; the dashboard reads files, and nothing imports it."""
    root = LIBRARY.parent
    offenders = {}
    for app in APPLICATIONS:
        for f in sorted((root / app).rglob("*.py")):
            others = imported_packages(f) & (set(APPLICATIONS) - {app} - ALLOWED[app])
            if others:
                offenders[str(f.relative_to(root))] = sorted(others)
    assert offenders == {}


def module_graph() -> dict[str, set[str]]:
    """{module: the project's modules it imports anywhere}, relative imports resolved, a package
    counted by its __init__ and ``from pkg import submodule`` as the submodule."""
    root = LIBRARY.parent
    files = {}
    for pkg in PACKAGES:
        for f in (root / pkg).rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f

    def owner(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, f in files.items():
        tree = ast.parse(f.read_text())
        skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test)
                   for child in node.body for n in ast.walk(child)}
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets.update(owner(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(max(node.level - 1, 0)):
                    base = base.rpartition(".")[0]
                module = (f"{base}.{node.module}" if node.module else base) if node.level \
                    else node.module
                targets.update(owner(f"{module}.{a.name}") if f"{module}.{a.name}" in files
                               else owner(module) for a in node.names)
        graph[name] = targets - {None, name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_the_projects_modules():
    graph = module_graph()
    assert len(graph) > 60 and "export.lowering" in graph["export.policy"]  # the graph is real
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_lazy_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []

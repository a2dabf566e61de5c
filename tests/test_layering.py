"""Imports: each module imports alone, with no cycle, not the root; layers import one way; the command stays light."""

import ast
import functools
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import det_estimator
from det_estimator._stack import has_estimator, needs_estimator

PACKAGE = Path(det_estimator.__file__).parent
MODULES = sorted(module.name for module in pkgutil.walk_packages(det_estimator.__path__, "det_estimator."))

# Each child imports one module as the first det-estimator module of its interpreter, so an
# import cycle that only works in some order fails there. The parent preloads the heavy
# third-party libraries (and nothing of det-estimator) so that a child costs a fork, not a
# TensorFlow import.
_IMPORT_EACH = textwrap.dedent(
    """
    import importlib, json, os, sys, traceback
    import numpy, sklearn.metrics, tensorflow, tensorboard, yaml
    # The rest of what some modules import, where this stack has it (the estimator stack's
    # tensorflow_estimator and Horovod, the web page's libraries): seconds a child each.
    for name in ("tensorflow_estimator", "horovod.tensorflow", "keras", "sqlalchemy", "psycopg",
                 "tensorboard.summary", "optuna", "starlette.applications", "jinja2", "uvicorn", "plotly",
                 "psutil", "tqdm"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    tensorflow.keras.layers  # tf.keras loads Keras on first use
    assert not [name for name in sys.modules if name.startswith("det_estimator")]
    failures = {}
    for name in json.loads(sys.argv[1]):
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read)
            try:
                importlib.import_module(name)
                message = ""
            except BaseException:
                message = traceback.format_exc()
            os.write(write, message.encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            message = pipe.read()
        os.waitpid(child, 0)
        if message:
            failures[name] = message
    print(json.dumps(failures))
    """
)


# A minute or two of forks: a long run (the cycles themselves are read from the source by
# test_no_import_cycle_at_module_level and its sibling, which run every time).
@pytest.mark.slow
def test_every_module_imports_on_its_own():
    assert len(MODULES) > 50
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, json.dumps(MODULES)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    if not has_estimator():
        # On the current stack the estimator half refuses with its one error, and nothing else fails.
        refused = {name: failures.pop(name) for name in MODULES if needs_estimator(name)}
        assert refused, "no module needs tf.estimator?"
        for name, message in refused.items():
            assert "EstimatorUnavailableError" in message.strip().splitlines()[-1], f"{name}:\n{message}"
    assert not failures, "\n\n".join(f"{name}:\n{message}" for name, message in failures.items())


@pytest.mark.parametrize(
    "module",
    [
        "det_estimator",
        "det_estimator.cli",
        "det_estimator.cli._experiments",
        "det_estimator.launcher",
        "det_estimator.orchestration",
        "det_estimator.store",
        "det_estimator.config",
        "det_estimator.checkpoint",
        "det_estimator.lifecycle",
        "det_estimator.core",
        "det_estimator.searcher",
    ],
)
def test_the_command_launcher_orchestration_and_core_load_no_tensorflow_nor_numpy(module):
    # Every process of a run imports these (the command, its launcher, each rank): NumPy and
    # TensorBoard's summary API (which loads NumPy) cost a third of a second each time, and
    # only a process that writes an event file or computes needs them.
    code = (
        f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'horovod', "
        "'numpy') or m.startswith('tensorboard.summary')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["det_estimator", "det_estimator.cli", "det_estimator.orchestration"])
def test_only_the_web_page_loads_the_web_libraries(module):
    code = (
        f"import sys, {module}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'jinja2', 'plotly')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# What each layer may not import (at module level or inside a function): imports go one way,
# front ends -> orchestration -> launcher, and worker -> controllers -> core -> the rest;
# the run lifecycle sits below both orchestration and core, just above the store.
_FRONT_ENDS = {"det_estimator.cli", "det_estimator.native", "det_estimator._run", "det_estimator.ui"}
_FORBIDDEN = {
    "det_estimator.launcher": _FRONT_ENDS
    | {"det_estimator.orchestration", "det_estimator.core", "det_estimator.estimator", "det_estimator.worker"},
    "det_estimator.orchestration": _FRONT_ENDS
    | {"det_estimator.core", "det_estimator.estimator", "det_estimator.worker"},
    "det_estimator.worker": _FRONT_ENDS | {"det_estimator.orchestration"},
    "det_estimator.estimator": _FRONT_ENDS | {"det_estimator.orchestration", "det_estimator.worker"},
    "det_estimator._trial_controller": _FRONT_ENDS
    | {"det_estimator.orchestration", "det_estimator.worker", "det_estimator.estimator", "det_estimator.keras"},
    "det_estimator.core": _FRONT_ENDS
    | {"det_estimator.orchestration", "det_estimator.estimator", "det_estimator.worker", "det_estimator.launcher"},
}
_BOTTOM = ("det_estimator.store", "det_estimator.checkpoint", "det_estimator.config", "det_estimator.reducers")
for _layer in _BOTTOM + (
    "det_estimator.searcher",
    "det_estimator.hooks",
    "det_estimator.errors",
    "det_estimator._info",
):
    _FORBIDDEN[_layer] = _FRONT_ENDS | {
        "det_estimator.orchestration",
        "det_estimator.core",
        "det_estimator.estimator",
        "det_estimator.worker",
        "det_estimator.launcher",
        "det_estimator.lifecycle",
    }
_FORBIDDEN["det_estimator.lifecycle"] = _FRONT_ENDS | {
    "det_estimator.orchestration",
    "det_estimator.core",
    "det_estimator.estimator",
    "det_estimator.keras",
    "det_estimator.worker",
    "det_estimator.launcher",
}


def _imports(path: Path) -> set[str]:
    """Every det_estimator module ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("det_estimator.")}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_layers_import_one_way():
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for layer, forbidden in _FORBIDDEN.items():
            if not _within(module, layer):
                continue
            for imported in _imports(path):
                for bad in forbidden:
                    if _within(imported, bad) and not _within(imported, layer):
                        violations.append(f"{module} imports {imported} ({layer} may not import {bad})")
    assert not violations, "\n".join(violations)


# The package root and import cycles, read from the source (no module is imported).
#
# The root (det_estimator/__init__.py) re-exports the public names and loads them on first
# use; a module of the package that imports the root back for one of them (as
# `from det_estimator import __version__` did) makes its own import depend on the root's,
# and hides what it really uses. Modules import the module that defines a name instead;
# `from det_estimator import core` (a subpackage or module) is such an import. The root
# itself is the only exception: no front end needs one.
#
# Cycles are counted between the package's modules, in two tests. At module level (what
# runs when a module is imported, class bodies and `try` blocks included), a cycle makes an
# import order fail. Imports inside functions run later, so they cannot break an import,
# but a cycle held together by them is still a cycle (the kind the STYLE review asked to
# undo), so they count in the second test. Imports under `if TYPE_CHECKING:` never run and
# do not count. An import of a package's module runs the package's __init__ first: that
# counts as an import of the package, except for the importer's own packages, which are
# already being imported by then.
_MODULE_FILES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
    for path in PACKAGE.rglob("*.py")
}
# Compiled modules (optional, so perhaps not built): their C source stands for them.
_MODULE_FILES.update(
    {".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts): path for path in PACKAGE.rglob("*.c")}
)
# Modules every layer may import, because they import nothing of the package.
_STANDALONE = (
    "det_estimator._environment_variables",
    "det_estimator._host_list",
    "det_estimator._pids",
    "det_estimator._root_cause",
    "det_estimator._version",
    "det_estimator.errors",
)


def _from_module(node: ast.ImportFrom, importer: str) -> str:
    """The module a ``from ... import`` statement names, relative ones resolved."""
    if not node.level:
        return node.module or ""
    package = importer.split(".")
    if _MODULE_FILES[importer].name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def _statements(body: list, in_function: bool = False):
    """``(import statement, whether it is inside a function)`` for every import that can run."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _statements(node.body, True)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _statements(node.orelse, in_function)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    yield from _statements(children, in_function)


def _imported_modules(node, importer: str) -> set[str]:
    """The package's modules whose code an import statement of ``importer`` runs."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        module = _from_module(node, importer)
        submodules = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in _MODULE_FILES]
        # `from package import name` of a name that is not a module runs the package for it.
        named = submodules + ([module] if len(submodules) < len(node.names) else [])
    found = set()
    for name in named:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            module = ".".join(parts[:end])
            own_package = importer == module or importer.startswith(module + ".")
            if module in _MODULE_FILES and (module == name or not own_package) and module != importer:
                found.add(module)
    return found


@functools.cache
def _import_graph(count_functions: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in _MODULE_FILES}
    for name, path in _MODULE_FILES.items():
        if path.suffix != ".py":
            continue
        for node, in_function in _statements(ast.parse(path.read_text(encoding="utf-8")).body):
            if count_functions or not in_function:
                graph[name] |= _imported_modules(node, name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle of each group of modules that import each other (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A path through ``group`` back to where it started, for the message."""
    start = min(group)
    paths = {start: [start]}
    pending = [start]
    while pending:
        module = pending.pop(0)
        for imported in sorted(graph[module] & group):
            if imported == start:
                return [*paths[module], start]
            if imported not in paths:
                paths[imported] = [*paths[module], imported]
                pending.append(imported)
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def test_no_module_of_the_package_imports_the_package_root():
    violations = []
    for name, path in sorted(_MODULE_FILES.items()):
        if name == "det_estimator" or path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                violations += [f"{name}: import {alias.name}" for alias in node.names if alias.name == "det_estimator"]
            elif isinstance(node, ast.ImportFrom) and _from_module(node, name) == "det_estimator":
                names = [alias.name for alias in node.names if f"det_estimator.{alias.name}" not in _MODULE_FILES]
                violations += [f"{name}: from det_estimator import {', '.join(names)}"] if names else []
    assert not violations, "import the module that defines the name instead:\n" + "\n".join(violations)


def test_no_import_cycle_at_module_level():
    cycles = _cycles(_import_graph(count_functions=False))
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_import_cycle_through_imports_inside_functions_either():
    cycles = _cycles(_import_graph(count_functions=True))
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("module", _STANDALONE)
def test_the_modules_every_layer_uses_import_nothing_of_the_package(module):
    assert _import_graph(count_functions=True)[module] == set()
    assert not _imports(_MODULE_FILES[module])

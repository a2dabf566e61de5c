"""Imports: each module imports alone, without a cycle; layers import one way; the command stays light."""

import ast
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import det_estimator

PACKAGE = Path(det_estimator.__file__).parent
MODULES = sorted(module.name for module in pkgutil.walk_packages(det_estimator.__path__, "det_estimator."))

# Each child imports one module as the first det-estimator module of its interpreter, so an
# import cycle that only works in some order fails there. The parent preloads the heavy
# third-party libraries (and nothing of det-estimator) so that a child costs a fork, not a
# TensorFlow import.
_IMPORT_EACH = textwrap.dedent(
    """
    import importlib, json, os, sys, traceback
    import numpy, sklearn.metrics, tensorflow, tensorflow_estimator, tensorboard, yaml
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
def test_the_command_launcher_orchestration_and_core_load_no_tensorflow(module):
    code = (
        f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'horovod')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# What each layer may not import (at module level or inside a function): imports go one way,
# front ends -> orchestration -> launcher, and worker -> controllers -> core -> the rest;
# the run lifecycle sits below both orchestration and core, just above the store.
_FRONT_ENDS = {"det_estimator.cli", "det_estimator.native", "det_estimator._run"}
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

"""Keras' internals are reached from _engine/_keras_compat.py alone, so that a port to Keras 3 changes one module."""

import ast
from pathlib import Path

import det_estimator

PACKAGE = Path(det_estimator.__file__).parent
COMPAT = PACKAGE / "keras" / "_engine" / "_keras_compat.py"


def _private_names_reached(tree: ast.AST) -> set[str]:
    """The private attribute names a module reads or writes: ``x._name`` and ``getattr(x, "_name")``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
        else:
            continue
        if name.startswith("_") and not name.startswith("__"):
            names.add(name)
    return names


def _keras_src_imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras.src"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if alias.name.startswith("keras.src"))
    return found


def test_no_module_but_the_compat_module_reaches_the_keras_internals_it_reaches():
    internals = _private_names_reached(ast.parse(COMPAT.read_text(encoding="utf-8")))
    assert {"_training_state", "_steps_per_execution", "_trackable_children"} <= internals  # the scan sees them

    reaching = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == COMPAT:
            continue
        reached = _private_names_reached(ast.parse(path.read_text(encoding="utf-8"))) & internals
        if reached:
            reaching[str(path.relative_to(PACKAGE))] = sorted(reached)
    assert reaching == {}, "call a function of keras/_engine/_keras_compat.py instead"


def test_no_module_but_the_compat_module_imports_keras_src():
    importing = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == COMPAT:
            continue
        found = _keras_src_imports(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            importing[str(path.relative_to(PACKAGE))] = found
    assert importing == {}, "call a function of keras/_engine/_keras_compat.py instead"


def test_the_scan_finds_a_reach_and_an_import_written_outside():
    tree = ast.parse(
        "from keras.src.engine import data_adapter\n"
        "state = model._training_state\n"
        "steps = getattr(model, '_steps_per_execution', None)\n"
    )
    assert _keras_src_imports(tree) == ["keras.src.engine"]
    assert {"_training_state", "_steps_per_execution"} <= _private_names_reached(tree)

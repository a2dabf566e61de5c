"""The DET_* environment variables are named in one module."""

import ast
from pathlib import Path

import det_estimator
from det_estimator import _environment_variables as environment_variables

PACKAGE = Path(det_estimator.__file__).parent
HOME = PACKAGE / "_environment_variables.py"


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


def test_no_module_but_one_spells_a_det_variable_in_its_code():
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            literal = isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            if literal and "DET_" in node.value:
                spelled.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert not spelled, "\n".join(spelled)


def test_the_names_are_distinct_det_variables():
    # That the module imports nothing of the package is tests/test_layering.py's to check.
    names = {name: value for name, value in vars(environment_variables).items() if name.isupper()}
    assert all(value.startswith("DET_") for value in names.values())
    assert len(set(names.values())) == len(names)

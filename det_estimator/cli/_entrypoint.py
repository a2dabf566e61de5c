"""Checks of a config's entrypoint that need no import: its file is there, and names a trial class.

Importing the user's module would import TensorFlow and run their module-level code in
the command's own process; reading its syntax tree finds most mistakes (a class that is
missing, misspelled, a function, or not a trial) at once, with exit status 2 and nothing
recorded, instead of after processes have started.
"""

import ast
import builtins
import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from det_estimator import launcher
from det_estimator.errors import DetEstimatorError

_EXPECTED = "a class deriving from det.EstimatorTrial or det.keras.TFKerasTrial"


class EntrypointError(DetEstimatorError, ValueError):
    """The config's entrypoint cannot be run; the message says why and what is expected."""


def _module_file(context_dir: Path, module: str) -> Optional[Path]:
    """The file of ``module`` in ``context_dir`` (``a/b.py`` or ``a/b/__init__.py``), None if neither is there."""
    relative = Path(*module.split("."))
    candidates = [relative.with_suffix(".py"), relative / "__init__.py"]
    return next((context_dir / c for c in candidates if (context_dir / c).is_file()), None)


def check_trial_entrypoint(context_dir: Path, module: str, class_name: str) -> None:
    """Refuses an entrypoint ``module:Class`` whose module is not in ``context_dir`` or does not define a trial class.

    A class whose bases are defined elsewhere, or a name the module imports or computes,
    is accepted: only importing the module would tell.

    Raises:
        EntrypointError: the module file is missing, is not valid Python, or defines
            ``class_name`` as something else than a trial class, or not at all.
    """
    relative = Path(*module.split("."))
    path = _module_file(context_dir, module)
    if path is None:
        raise EntrypointError(
            f"The config's entrypoint module {module!r} is not in CONTEXT_DIR {context_dir}: expected "
            f"{relative.with_suffix('.py')} there."
        )
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except SyntaxError as error:
        raise EntrypointError(
            f"The config's entrypoint module {path} is not valid Python: {error.msg} (line {error.lineno})."
        ) from None
    entrypoint = f"{module}:{class_name}"
    top_name = class_name.split(".")[0]
    definition = _top_level_definition(tree, top_name)
    if definition is None:
        if _imports_everything(tree):
            return
        classes = sorted(node.name for node in tree.body if isinstance(node, ast.ClassDef))
        known = f" It defines: {', '.join(classes)}." if classes else " It defines no class."
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r} names {top_name!r}, which {path} does not define.{known} "
            f"Expected {_EXPECTED}."
        )
    if isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r} is a function (line {definition.lineno} of {path}), not a "
            f"trial class. Expected {_EXPECTED}; a training script is given as a command instead, e.g. "
            "`entrypoint: python3 train.py`."
        )
    if isinstance(definition, ast.Import):
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r} is a module (imported on line {definition.lineno} of {path}), "
            f"not a trial class. Expected {_EXPECTED}."
        )
    value = getattr(definition, "value", None)
    if isinstance(value, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr)):
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r} is a value ({ast.unparse(value)[:40]}, line "
            f"{definition.lineno} of {path}), not a trial class. Expected {_EXPECTED}."
        )
    if isinstance(definition, ast.ClassDef) and "." not in class_name and not definition.bases:
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r} is a class that derives from nothing (line "
            f"{definition.lineno} of {path}), so it is not a trial. Expected {_EXPECTED}."
        )
    if isinstance(definition, ast.ClassDef) and "." not in class_name:
        bases = [_base_name(base) for base in definition.bases]
        if all(base in ("object", "ABC") for base in bases):
            raise EntrypointError(
                f"The config's entrypoint {entrypoint!r} derives from {', '.join(bases)} (line "
                f"{definition.lineno} of {path}), so it is not a trial. Expected {_EXPECTED}."
            )
        outside = [_non_trial_origin(tree, base) for base in definition.bases]
        if all(outside):
            written = ", ".join(ast.unparse(base) for base in definition.bases)
            raise EntrypointError(
                f"The config's entrypoint {entrypoint!r} derives only from classes of "
                f"{' and '.join(sorted(set(outside)))} ({written}, line {definition.lineno} of {path}), so it is "
                f"not a trial. Expected {_EXPECTED}: the class whose methods build the model, not the model."
            )
    if isinstance(definition, ast.ClassDef) and "." not in class_name:
        _check_trial_class(definition, entrypoint, path)
    if (
        isinstance(definition, ast.Assign)
        and isinstance(value, ast.Name)
        and value.id in _BUILTIN_CLASSES
        and _top_level_definition(tree, value.id) is None
    ):
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r} is Python's {value.id} (line {definition.lineno} of "
            f"{path}), not a trial class. Expected {_EXPECTED}."
        )


def derives_from_estimator_trial(context_dir: Path, module: str, class_name: str) -> bool:
    """Whether the entrypoint's class, as its module writes it, derives from ``EstimatorTrial`` directly.

    Read without importing the module; an entrypoint :func:`check_trial_entrypoint` accepted.
    """
    path = _module_file(context_dir, module)
    if path is None:
        return False
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    definition = _top_level_definition(tree, class_name.split(".")[0])
    return isinstance(definition, ast.ClassDef) and any(
        _base_name(base) == "EstimatorTrial" for base in definition.bases
    )


# The methods a trial class must define, by the base it derives from directly (the abstract
# methods of EstimatorTrial and TFKerasTrial; tests/cli/test_entrypoint_checks.py keeps the
# two lists equal to them).
TRIAL_BUILDERS = {
    "EstimatorTrial": ("build_estimator", "build_train_spec", "build_validation_spec"),
    "TFKerasTrial": ("build_model", "build_training_data_loader", "build_validation_data_loader"),
}


def _check_trial_class(definition: ast.ClassDef, entrypoint: str, path: Path) -> None:
    """Refuses a trial class that derives from one trial base alone and cannot work, before it is launched.

    The harness builds it as ``Trial(context)`` and calls its builders: an ``__init__``
    that takes no context, or a builder left undefined, would fail in every process after
    launch. A class with another base (a trial of the user's own) is left to the launch.
    """
    if len(definition.bases) != 1 or _base_name(definition.bases[0]) not in TRIAL_BUILDERS:
        return
    base = _base_name(definition.bases[0])
    methods = {node.name: node for node in definition.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    init = methods.get("__init__")
    if init is not None and len(init.args.posonlyargs + init.args.args) < 2 and init.args.vararg is None:
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r}: its __init__ (line {init.lineno} of {path}) takes no context, "
            f"but det-estimator builds a trial as {definition.name}(context). Expected: def __init__(self, context) "
            "calling super().__init__(context)."
        )
    missing = [name for name in TRIAL_BUILDERS[base] if name not in methods]
    if missing:
        raise EntrypointError(
            f"The config's entrypoint {entrypoint!r} (line {definition.lineno} of {path}) derives from {base} but "
            f"does not define {', '.join(missing)}, which every {base} defines. Expected: "
            + "; ".join(f"def {name}(self)" for name in missing)
            + "."
        )


def check_script_entrypoint(context_dir: Path, command: list[str]) -> None:
    """Refuses a ``python script.py ...`` entrypoint whose script is not in the context directory."""
    scripts = [word for word in command if word.endswith(".py")]
    for script in scripts[:1]:
        path = Path(script) if os.path.isabs(script) else context_dir / script
        if not path.is_file():
            raise EntrypointError(
                f"The config's entrypoint {shlex.join(command)!r} runs {script}, which is not in CONTEXT_DIR "
                f"{context_dir}."
            )


def check_program(context_dir: Path, command: list[str], environment: Mapping[str, str], what: str) -> None:
    """Refuses a command whose program (its first word) this machine cannot start.

    The command runs in ``context_dir`` with this process's environment and the config's
    variables, so a program named by a path is looked for from ``context_dir``, and a
    bare name on the ``PATH`` the command gets (``python``/``python3`` is this interpreter).

    Args:
        context_dir: where the command runs.
        command: the command's words.
        environment: the variables the config adds to the command's environment.
        what: the command, for the message (e.g. "The config's entrypoint").

    Raises:
        EntrypointError: the program is not an executable file, or not on ``PATH``.
    """
    program = launcher.script_command(command)[0]
    shown = f"{what} {shlex.join(command)!r}"
    if os.sep in program:
        path = Path(program) if os.path.isabs(program) else context_dir / program
        if path.is_file() and os.access(path, os.X_OK):
            return
        problem = "is not there" if not path.exists() else "is not an executable file"
        raise EntrypointError(f"{shown} runs {path}, which {problem}. Expected a program this user can run.")
    search_path = environment.get("PATH", os.environ.get("PATH", os.defpath))
    # Relative entries of PATH are taken from the directory the command runs in.
    directories = [str(context_dir / entry) for entry in search_path.split(os.pathsep)]
    if shutil.which(program, path=os.pathsep.join(directories)) is None:
        raise EntrypointError(
            f"{shown} runs {program!r}, which is not a program on PATH. Expected a command this machine can run, "
            'e.g. "python3 train.py".'
        )


def _top_level_definition(tree: ast.Module, name: str) -> Optional[ast.stmt]:
    """The last top-level statement that binds ``name`` (a class, function, assignment or import)."""
    found: Optional[ast.stmt] = None
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                found = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                found = node
        elif isinstance(node, (ast.If, ast.Try)) and _binds_anywhere(node, name):
            found = node  # defined conditionally: only running it would tell
    return found


def _binds_anywhere(node: ast.AST, name: str) -> bool:
    for child in ast.walk(node):
        if isinstance(child, (ast.ClassDef, ast.FunctionDef)) and child.name == name:
            return True
        if isinstance(child, ast.Name) and child.id == name and isinstance(child.ctx, ast.Store):
            return True
        if isinstance(child, (ast.Import, ast.ImportFrom)) and any(
            (alias.asname or alias.name) == name for alias in child.names
        ):
            return True
    return False


def _imports_everything(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names) for node in tree.body
    )


# Packages that define no trial: a class all of whose bases come from them is not one.
_NON_TRIAL_PACKAGES = frozenset({"tensorflow", "keras", "tf_keras", "tensorflow_estimator", "numpy", "builtins"})
_BUILTIN_CLASSES = frozenset(name for name, value in vars(builtins).items() if isinstance(value, type))


def _non_trial_origin(tree: ast.Module, base: ast.expr) -> str:
    """The package a base class comes from when it is one that defines no trial, else ""."""
    root = base
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return ""
    binding = _top_level_definition(tree, root.id)
    if binding is None:
        return "Python's builtins" if root is base and root.id in _BUILTIN_CLASSES else ""
    if isinstance(binding, ast.Import):
        module = next(alias.name for alias in binding.names if (alias.asname or alias.name.split(".")[0]) == root.id)
    elif isinstance(binding, ast.ImportFrom) and binding.level == 0 and binding.module:
        module = binding.module
    else:
        return ""
    package = module.split(".")[0]
    return package if package in _NON_TRIAL_PACKAGES else ""


def _base_name(base: ast.expr) -> str:
    """``det.EstimatorTrial`` -> ``EstimatorTrial``; anything else as written."""
    if isinstance(base, ast.Attribute):
        return base.attr
    if isinstance(base, ast.Name):
        return base.id
    return ast.unparse(base)

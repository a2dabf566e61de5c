"""Writes the files of an estimator checkpoint (model files, SavedModels, RunHook files) and restores them."""

import glob
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import tensorflow as tf

from det_estimator._names import DIRECTORY_NAME_RULE, is_directory_name
from det_estimator._saved_models import MODEL_DIR, RESERVED_NAMES
from det_estimator.errors import TrialDefinitionError
from det_estimator.hooks import RunHook


def check_serving_names(
    serving_fns: Mapping[str, Any], source: str = "build_serving_input_receiver_fns() must return"
) -> None:
    """Rejects names that cannot be directory names of their SavedModels.

    Args:
        serving_fns: the serving input receiver functions, by name.
        source: where they came from, as the start of the message for a value that is
            not a dict ("build_serving_input_receiver_fns() must return").

    Raises:
        TypeError: the value is not a dict of callables.
        ValueError: a name is not made of letters, digits, ``_``, ``.`` and ``-``.
    """
    if not isinstance(serving_fns, Mapping):
        raise TrialDefinitionError(
            f"{source} a dict of name to serving_input_receiver_fn. Received: {type(serving_fns).__name__}"
        )
    for name, fn in serving_fns.items():
        if not is_directory_name(name) or name in RESERVED_NAMES:
            raise TrialDefinitionError(
                f"Each name returned by build_serving_input_receiver_fns() must {DIRECTORY_NAME_RULE}, and not be "
                f"one of {', '.join(RESERVED_NAMES)} (other parts of the checkpoint). Received: {name!r}"
            )
        if not callable(fn):
            raise TrialDefinitionError(f"The serving_input_receiver_fn of {name!r} must be callable. Received: {fn!r}")


def write_checkpoint_files(
    directory: Path,
    local_checkpoint: str,
    estimator: tf.estimator.Estimator,
    serving_fns: Mapping[str, Callable[[], Any]],
    run_hooks: list[RunHook],
) -> None:
    """Writes a checkpoint's files into ``directory`` from a TF checkpoint saved by this process (the chief).

    The model files come first, then one SavedModel per serving function, then the
    RunHooks' ``on_checkpoint_end``; the caller seals the directory once all are written.
    """
    model_dir = directory / MODEL_DIR
    model_dir.mkdir()
    for path in glob.glob(glob.escape(local_checkpoint) + ".*"):
        shutil.copy2(path, model_dir)
    name = Path(local_checkpoint).name
    (model_dir / "checkpoint").write_text(
        f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n', encoding="utf-8"
    )
    for serving_name, serving_fn in serving_fns.items():
        _export_saved_model(estimator, serving_fn, local_checkpoint, directory / serving_name)
    for hook in run_hooks:
        hook.on_checkpoint_end(str(directory))


def _export_saved_model(estimator, serving_fn, local_checkpoint: str, destination: Path) -> None:
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=".export-") as export_base:
        exported = estimator.export_saved_model(export_base, serving_fn, checkpoint_path=local_checkpoint)
        Path(exported.decode() if isinstance(exported, bytes) else exported).rename(destination)


def restore_into(checkpoint_path: Path, model_dir: str) -> None:
    """Copies a checkpoint's model files into ``model_dir``, where the Estimator resumes from them."""
    source = checkpoint_path / MODEL_DIR
    if not source.is_dir():
        raise ValueError(f"Checkpoint {checkpoint_path} has no {MODEL_DIR}/ directory with model files.")
    for path in source.iterdir():
        shutil.copy2(path, model_dir)

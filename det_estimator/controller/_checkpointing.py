"""Writes a trial checkpoint (model files, SavedModels, RunHook files) and restores one."""

import glob
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import tensorflow as tf

from det_estimator._names import DIRECTORY_NAME_RULE, is_directory_name
from det_estimator._serving import SAVED_MODELS_DIR
from det_estimator.checkpoint import Checkpoint, TrialCheckpoints
from det_estimator.hooks import RunHook

MODEL_DIR = "model"


def check_serving_names(serving_fns: Mapping[str, Any]) -> None:
    """Rejects names that cannot be directory names of their SavedModels.

    Raises:
        TypeError: the value is not a dict of callables.
        ValueError: a name is not made of letters, digits, ``_``, ``.`` and ``-``.
    """
    if not isinstance(serving_fns, Mapping):
        raise TypeError(
            "build_serving_input_receiver_fns() must return a dict of name to serving_input_receiver_fn. "
            f"Received: {type(serving_fns).__name__}"
        )
    for name, fn in serving_fns.items():
        if not is_directory_name(name):
            raise ValueError(
                f"Each name returned by build_serving_input_receiver_fns() must {DIRECTORY_NAME_RULE}. "
                f"Received: {name!r}"
            )
        if not callable(fn):
            raise TypeError(f"The serving_input_receiver_fn of {name!r} must be callable. Received: {fn!r}")


def write_checkpoint(
    store: TrialCheckpoints,
    local_checkpoint: str,
    estimator: tf.estimator.Estimator,
    serving_fns: Mapping[str, Callable[[], Any]],
    run_hooks: list[RunHook],
    metadata: dict[str, Any],
) -> Checkpoint:
    """Seals a checkpoint from a TF checkpoint saved by this process (the chief).

    The model files come first, then one SavedModel per serving function, then the
    RunHooks' ``on_checkpoint_end``; the store seals the directory atomically once all
    are written, so a crash at any moment leaves the previous checkpoints as they were.
    """
    with store.write(metadata) as pending:
        model_dir = pending.path / MODEL_DIR
        model_dir.mkdir()
        for path in glob.glob(glob.escape(local_checkpoint) + ".*"):
            shutil.copy2(path, model_dir)
        name = Path(local_checkpoint).name
        (model_dir / "checkpoint").write_text(
            f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n', encoding="utf-8"
        )
        for serving_name, serving_fn in serving_fns.items():
            _export_saved_model(estimator, serving_fn, local_checkpoint, pending.path / SAVED_MODELS_DIR / serving_name)
        for hook in run_hooks:
            hook.on_checkpoint_end(str(pending.path))
    return pending.checkpoint


def _export_saved_model(estimator, serving_fn, local_checkpoint: str, destination: Path) -> None:
    destination.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=".export-") as export_base:
        exported = estimator.export_saved_model(export_base, serving_fn, checkpoint_path=local_checkpoint)
        Path(exported.decode() if isinstance(exported, bytes) else exported).rename(destination)


def restore_into(checkpoint: Checkpoint, model_dir: str) -> None:
    """Copies a checkpoint's model files into ``model_dir``, where the Estimator resumes from them."""
    source = checkpoint.path / MODEL_DIR
    if not source.is_dir():
        raise ValueError(f"Checkpoint {checkpoint.path} has no {MODEL_DIR}/ directory with model files.")
    for path in source.iterdir():
        shutil.copy2(path, model_dir)

"""Keras checkpoints in the layouts det-estimator wrote before its one Keras checkpoint format, written as then.

Frozen copies of the writers of that time, kept so that the readers of those layouts
stay tested once nothing in the package writes them any more:

- **trial v1**, a ``TFKerasTrial``'s: ``model/state.*`` (a ``tf.train.Checkpoint`` of the
  model, its optimizer through it, the global generator and the layers' generators),
  ``saved_model/``, ``callbacks.json`` (and ``.npz``), ``data/rank<N>.*``; the position
  and every rank's random states in ``metadata.json``; no kind recorded.
- **callback v1**, ``DeterminedCallback``'s: ``model_checkpoint.*`` (the model, the
  optimizer and the layers' generators) and ``callback_state.json`` (the position, the
  ``continue_id`` and the random states); the position again in ``metadata.json``.
- **context.fit v1**: callback v1 with the architecture beside it, ``model_architecture.json``.
- **format 2**, every front end's: the one Keras format with its variables under
  ``model/state.*`` (a ``tf.train.Checkpoint`` of the model, the optimizer, the global
  generator and the layers' generators, whose root is no model), ``model/architecture.json``
  and ``random_states.json``; ``"checkpoint_kind": "keras"`` and ``keras_checkpoint``
  (``format: 2``) in ``metadata.json``.
"""

import importlib
import json
import random
from pathlib import Path
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator.checkpoint import TrialCheckpoints
from det_estimator.keras._engine._keras_compat import KERAS_2_PACKAGE

TRIAL_STATE = "model/state"
SAVED_MODEL = "saved_model"
CALLBACK_WEIGHTS = "model_checkpoint"
CALLBACK_STATE = "callback_state.json"
ARCHITECTURE = "model_architecture.json"
FRAMEWORK = {"det_estimator": "0.2.0", "tensorflow": tf.__version__}


def layer_generators(model: tf.keras.Model) -> list[tf.random.Generator]:
    """The ``tf.random.Generator`` of each layer that has one, in layer order."""
    found = []
    for module in [model, *model.submodules]:
        generator = getattr(getattr(module, "_random_generator", None), "_generator", None)
        if isinstance(generator, tf.random.Generator):
            found.append(generator)
    return found


def python_and_numpy_state() -> dict[str, Any]:
    version, state, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(state), gauss],
        "numpy": [name, keys.tolist(), int(position), int(has_gauss), float(cached)],
    }


def callback_states(states: list[tuple[type, Any]]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``callbacks.json``'s content and the arrays of ``callbacks.npz`` for ``(callback class, state)`` pairs."""
    arrays: dict[str, np.ndarray] = {}

    def encode(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            key = f"a{len(arrays)}"
            arrays[key] = value
            return {"__ndarray__": key}
        if isinstance(value, dict):
            return {key: encode(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [encode(item) for item in value]
        return value

    records = [{"class": f"{kind.__module__}.{kind.__qualname__}", "state": encode(state)} for kind, state in states]
    return {"format": 1, "callbacks": records}, arrays


def write_trial_v1(
    directory: Path,
    model: tf.keras.Model,
    batches: int,
    *,
    slots: int = 1,
    callbacks: Optional[list[tuple[type, Any]]] = None,
    best_validation_metric: Optional[float] = None,
    last_validation_batches: int = -1,
    validation_metrics: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """Writes a TFKerasTrial's checkpoint files (v1) into ``directory``; returns its metadata.

    The model must have been called (its inputs known) for the SavedModel.
    """
    (directory / "model").mkdir(parents=True, exist_ok=True)
    generators = layer_generators(model)
    tf.train.Checkpoint(
        model=model, global_generator=tf.random.get_global_generator(), layer_generators=generators
    ).write(str(directory / TRIAL_STATE))
    # The signature the trial's export traced, from Keras 2's package (tf_keras under TF_USE_LEGACY_KERAS=1).
    saving_utils = importlib.import_module(f"{KERAS_2_PACKAGE}.src.saving.legacy.saving_utils")

    holder = tf.Module()
    holder.model_variables = list(model.variables)
    signature = saving_utils.trace_model_call(model)
    tf.saved_model.save(holder, str(directory / SAVED_MODEL), signatures={"serving_default": signature})
    if callbacks is not None:
        content, arrays = callback_states(callbacks)
        (directory / "callbacks.json").write_text(json.dumps(content), encoding="utf-8")
        if arrays:
            np.savez(directory / "callbacks.npz", **arrays)
    own = {
        **python_and_numpy_state(),
        "tensorflow": [g.state.numpy().tolist() for g in [tf.random.get_global_generator(), *generators]],
    }
    metadata = {
        "steps_completed": batches,
        "batches_trained": batches,
        "data_position": batches * slots,
        "slots": slots,
        "trial_seed": 1,
        "hparams": {},
        "config": {},
        "rng_states": [own] * slots,
        "best_validation_metric": best_validation_metric,
        "last_validation_batches": last_validation_batches,
        "framework": FRAMEWORK,
    }
    if validation_metrics is not None:
        metadata["validation_metrics"] = validation_metrics
    return metadata


def seal_trial_v1(trial_checkpoint_dir: Path, model: tf.keras.Model, batches: int, **options: Any) -> Path:
    """Writes a TFKerasTrial's checkpoint (v1) among a trial's checkpoints, sealed as the trial sealed it."""
    checkpoints = TrialCheckpoints(trial_checkpoint_dir)
    with checkpoints.write({"steps_completed": batches}) as pending:
        pending.metadata.update(write_trial_v1(pending.path, model, batches, **options))
    return pending.checkpoint.path


def write_callback_v1(
    directory: Path,
    model: tf.keras.Model,
    *,
    epoch: int,
    batch: int,
    steps_completed: int,
    continue_id: Any,
    steps_per_epoch: Optional[int] = None,
    epochs: Optional[int] = None,
    architecture: bool = False,
    random_states: Optional[list[dict[str, Any]]] = None,
) -> dict[str, Any]:
    """Writes DeterminedCallback's checkpoint files (v1) into ``directory``; returns its metadata.

    ``architecture`` adds ``model_architecture.json``, as ``context.fit`` did. The random
    states are those at the start of the epoch, one per rank (by default this process's
    now).
    """
    directory.mkdir(parents=True, exist_ok=True)
    generators = layer_generators(model)
    parts = {"layer_generators": generators} if generators else {}
    tf.train.Checkpoint(model=model, optimizer=model.optimizer, **parts).write(str(directory / CALLBACK_WEIGHTS))
    state = {
        "version": 1,
        "continue_id": continue_id,
        "epoch": epoch,
        "batch": batch,
        "steps_completed": steps_completed,
        "steps_per_epoch": steps_per_epoch,
        "epochs": epochs,
    }
    with_random = {
        **state,
        "random_states": random_states if random_states is not None else [python_and_numpy_state()],
        "generator_states": [[g.state.numpy().tolist() for g in generators]],
    }
    (directory / CALLBACK_STATE).write_text(json.dumps(with_random, indent=2), encoding="utf-8")
    if architecture:
        (directory / ARCHITECTURE).write_text(model.to_json(), encoding="utf-8")
    return {"steps_completed": steps_completed, "framework": FRAMEWORK, **state}


def store_callback_v1(core_context: Any, model: tf.keras.Model, **options: Any) -> str:
    """Writes DeterminedCallback's checkpoint (v1) through ``core_context``; returns its storage id."""
    keys = ("epoch", "batch", "steps_completed", "continue_id", "steps_per_epoch", "epochs")
    state = {"version": 1, **{key: options.get(key) for key in keys}}
    metadata = {"steps_completed": options["steps_completed"], "framework": FRAMEWORK, **state}
    with core_context.checkpoint.store_path(metadata) as (path, storage_id):
        write_callback_v1(Path(path), model, **options)
    return storage_id


def store_callback_format_2(
    core_context: Any,
    model: tf.keras.Model,
    *,
    epoch: int,
    batch: int,
    steps_completed: int,
    continue_id: Any,
    steps_per_epoch: Optional[int] = None,
    epochs: Optional[int] = None,
) -> str:
    """Writes DeterminedCallback's checkpoint in format 2 through ``core_context``; returns its storage id."""
    generators = [tf.random.get_global_generator(), *layer_generators(model)]
    contents = {
        "variables": "model/state",
        "architecture": "model/architecture.json",
        "saved_model": None,
        "callbacks": None,
        "iterators": None,
        "random_states": "random_states.json",
    }
    position = {
        "steps_completed": steps_completed,
        "epoch": epoch,
        "batch": batch,
        "continue_id": continue_id,
        "steps_per_epoch": steps_per_epoch,
        "epochs": epochs,
    }
    metadata = {
        **position,
        "checkpoint_kind": "keras",
        "keras_checkpoint": {"format": 2, "written_by": "DeterminedCallback", "keras": "2.15.0", "contents": contents},
        "framework": FRAMEWORK,
    }
    with core_context.checkpoint.store_path(metadata) as (path, storage_id):
        directory = Path(path)
        (directory / "model").mkdir(parents=True, exist_ok=True)
        parts = {"global_generator": generators[0], "layer_generators": generators[1:]}
        tf.train.Checkpoint(model=model, optimizer=model.optimizer, **parts).write(str(directory / TRIAL_STATE))
        (directory / "model" / "architecture.json").write_text(model.to_json(), encoding="utf-8")
        own = {**python_and_numpy_state(), "generators": [g.state.numpy().tolist() for g in generators]}
        (directory / "random_states.json").write_text(json.dumps({"ranks": [own]}), encoding="utf-8")
    return storage_id

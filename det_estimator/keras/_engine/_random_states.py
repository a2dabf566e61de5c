"""The TensorFlow random states a Keras trial resumes with: the global generator and the layers'.

Before the model is built, Keras 2 is told to draw its layers' randomness (dropout,
noise and the like) from ``tf.random.Generator`` objects rather than from TensorFlow's
stateful random ops, whose position no checkpoint can hold. The generators' states
are variables, which every checkpoint saves, so a resumed trial draws the dropout masks
an uninterrupted one would. Keras 3 layers draw from ``keras.random.SeedGenerator``
objects from the start; their states are variables too, which a ``tf.train.Checkpoint``
of the model leaves out: they are checkpointed beside it, as Keras 2 layers' generators
are. Python's and NumPy's states are kept as the estimator controller keeps them
(``det_estimator._process_random_state``).
"""

import logging
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator._process_random_state import restore_python_and_numpy_state
from det_estimator.keras._engine import _keras_compat

logger = logging.getLogger("det_estimator.keras")


def seed_everything(seed: int) -> None:
    """Seeds Python, NumPy, TensorFlow (global seed and global generator) and Keras' own seed generator."""
    tf.keras.utils.set_random_seed(seed)
    tf.random.set_global_generator(tf.random.Generator.from_seed(seed))


def restore_python_and_numpy(own: dict[str, Any]) -> None:
    """Puts back Python's and NumPy's states of one process's entry of ``python_and_numpy_state()``."""
    restore_python_and_numpy_state([own], 0)


def use_generators_in_layers() -> bool:
    """Makes Keras layers built from now on draw from ``tf.random.Generator`` objects; returns the previous setting."""
    return _keras_compat.enable_layer_generators()


def restore_layer_setting(previous: bool) -> None:
    """Puts back the setting :func:`use_generators_in_layers` changed (a trial run in the caller's process)."""
    if not previous:
        _keras_compat.disable_layer_generators()


def create_layer_generators(model: tf.keras.Model) -> None:
    """Creates the layers' generators now (Keras does at their first call), for a checkpoint to restore."""
    for _, random_generator in _keras_compat.random_layers(model):
        _keras_compat.create_generator(random_generator)


def layers_without_generators(model: tf.keras.Model) -> list[str]:
    """The layers that draw from TensorFlow's stateful random ops (built before :func:`use_generators_in_layers`)."""
    return [
        layer.name
        for layer, random_generator in _keras_compat.random_layers(model)
        if _keras_compat.draws_from_stateful_ops(random_generator)
    ]


def all_generators(model: tf.keras.Model) -> list[tf.random.Generator]:
    """The global generator and each layer's, in the order of :func:`generators`."""
    found = generators(model)
    return [found["global_generator"], *found["layer_generators"]]


def generators(model: tf.keras.Model) -> dict[str, Any]:
    """The trackable random states to checkpoint: the global generator and each layer's, in layer order."""
    found = [_keras_compat.generator_of(random_generator) for _, random_generator in _keras_compat.random_layers(model)]
    found = [generator for generator in found if generator is not None]
    return {"global_generator": tf.random.get_global_generator(), "layer_generators": found}


def generator_states(found: list[tf.random.Generator]) -> list[list[int]]:
    """The states of generators, as JSON values (for a process's own entry in a checkpoint).

    The processes' states part when they draw different amounts, as a dropout layer
    does on a smaller batch (the last one of an epoch of arrays that do not divide
    evenly): a checkpoint that held the chief's alone would give every process its masks.
    """
    return [generator.state.numpy().tolist() for generator in found]


def restore_generator_states(found: list[tf.random.Generator], states: Optional[list[list[int]]]) -> None:
    """Puts back what :func:`generator_states` returned, when it was saved for generators of the same shapes."""
    if states is None or len(states) != len(found):
        return
    if any(list(generator.state.shape) != [len(state)] for generator, state in zip(found, states)):
        return
    for generator, state in zip(found, states):
        value = np.asarray(state, dtype=generator.state.dtype.as_numpy_dtype)
        if not np.array_equal(generator.state.numpy(), value):  # most often the chief's, just read
            generator.state.assign(value)


def warn_of_layers_without_generators(model: tf.keras.Model) -> None:
    """Warns, naming them, of the layers whose draws no checkpoint holds (they resume with other masks)."""
    names = layers_without_generators(model)
    if names:
        logger.warning(
            "Layers %s draw from TensorFlow's stateful random ops, whose position no checkpoint holds: the "
            "resumed training draws other masks than an uninterrupted one would. To resume exactly, call "
            "tf.keras.backend.experimental.enable_tf_random_generator() before building the model "
            "(det.keras.init() does it in a trial).",
            ", ".join(names),
        )

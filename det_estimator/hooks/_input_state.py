"""The training input's position, saved with each checkpoint, so a resume costs the same at any position.

Each process saves the state of its training iterator (its place in the data, its
shuffle buffer and seed) with every checkpoint and restores it when the trial resumes,
instead of replaying the input up to the saved position. This is how TensorFlow's own
``CheckpointInputPipelineHook`` saves an Estimator's input; like it, this uses
``_IteratorSaveable`` (TensorFlow 2.15's, which det-estimator pins).

A pipeline whose state TensorFlow cannot serialize (a ``py_func``, a generator, a
stateful random op in a ``map``) fails to save: its resume then replays the input, as
before, and a warning says so once.
"""

import logging
import warnings
from pathlib import Path
from typing import Optional

import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops
from tensorflow.python.data.ops.options import ExternalStatePolicy

from det_estimator._saved_models import INPUT_DIR

logger = logging.getLogger("det_estimator")

# A checkpoint holds one directory per process: <INPUT_DIR>/rank-<r>/input.ckpt.*
_PREFIX = "input.ckpt"


def input_saver() -> Optional[tf.compat.v1.train.Saver]:
    """A Saver of the training graph's input iterators; call while the graph is built (a hook's ``begin``)."""
    iterators = tf.compat.v1.get_collection(iterator_ops.GLOBAL_ITERATORS)
    if not iterators:
        return None
    saveables = [
        iterator_ops._IteratorSaveable(iterator, iterator.name, external_state_policy=ExternalStatePolicy.FAIL)
        for iterator in iterators
    ]
    return tf.compat.v1.train.Saver(saveables, max_to_keep=None, save_relative_paths=True)


def save_input_state(session: tf.compat.v1.Session, saver: Optional[tf.compat.v1.train.Saver], directory: Path) -> bool:
    """Saves the input iterators' state into ``directory``; False when the pipeline cannot be saved."""
    if saver is None:
        return False
    directory.mkdir(parents=True, exist_ok=True)
    try:
        saver.save(session, str(directory / _PREFIX), write_meta_graph=False, write_state=False)
    except tf.errors.OpError as error:
        warnings.warn(
            "The training input pipeline holds state that no checkpoint can save (a py_func, a generator, or a "
            "stateful random op in a map): a resume replays it from its start up to the saved position, which takes "
            f"time in proportion to the position. ({type(error).__name__}: {str(error).splitlines()[0]})",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return True


def rank_directory(checkpoint: Path, rank: int) -> Path:
    """Where one process's input state lives in a checkpoint."""
    return checkpoint / INPUT_DIR / f"rank-{rank}"


def restore_input_state(session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver, directory: str) -> None:
    """Puts the input iterators back where :func:`save_input_state` saved them."""
    saver.restore(session, str(Path(directory) / _PREFIX))

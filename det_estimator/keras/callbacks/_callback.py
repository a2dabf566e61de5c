"""Callback: a Keras callback with workload and checkpoint hooks, and a state saved in every checkpoint."""

from typing import Any, Optional

import tensorflow as tf


class Callback(tf.keras.callbacks.Callback):
    """A ``tf.keras.callbacks.Callback`` that also hears of workloads and checkpoints, and keeps its state.

    Subclass it for callbacks whose state must survive a pause: the harness saves what
    :meth:`get_state` returns in every checkpoint and hands it back to
    :meth:`load_state` when the trial resumes, after ``on_train_begin`` (where Keras
    callbacks reset themselves). States are matched to callbacks by their position in
    ``keras_callbacks()`` and their class, so keep that list in a stable order.

    A state may hold JSON values (dicts with string keys, lists, tuples, strings,
    numbers including NaN and infinities, booleans, None), NumPy arrays and scalars,
    and tensors or variables (read as NumPy arrays). The JSON part is stored in the
    checkpoint's ``callbacks.json`` and the arrays in ``callbacks.npz``, which is read
    back without pickle, so a checkpoint never runs code when it is loaded. Tuples come
    back as lists, tensors as NumPy arrays; anything else is refused when the
    checkpoint is written, with the path of the offending value.

    How the harness differs from ``model.fit``:

    - ``on_epoch_end`` is called every ``records_per_epoch`` records (from the
      experiment config) with empty logs: training is scheduled in workloads of
      ``scheduling_unit`` batches, not in epochs, so no epoch's metrics exist. Without
      ``records_per_epoch`` a ``Callback`` that overrides ``on_epoch_end`` is an error
      (a plain Keras callback gets a warning, and its ``on_epoch_end`` never runs).
    - ``on_test_end`` receives the validation metrics of every process combined
      (without the ``val_`` prefix), after the validation of each
      ``min_validation_period``.
    - ``on_train_begin`` and ``on_train_end`` bracket each run of the trial: a
      resumed trial calls them again.

    Example:
        ::

            class CountValidations(det.keras.callbacks.Callback):
                def __init__(self):
                    super().__init__()
                    self.validations = 0

                def on_test_end(self, logs=None):
                    self.validations += 1

                def get_state(self):
                    return {"validations": self.validations}

                def load_state(self, state):
                    self.validations = state["validations"]
    """

    def on_train_workload_begin(
        self, total_batches_trained: int, batches_requested: Optional[int], logs: dict[str, Any]
    ) -> None:
        """Called before a workload of training.

        Args:
            total_batches_trained: batches trained before the workload, in all runs.
            batches_requested: batches the workload will train (at most ``scheduling_unit``;
                fewer if training pauses or stops).
            logs: an empty dict.
        """

    def on_train_workload_end(self, total_batches_trained: int, logs: dict[str, Any]) -> None:
        """Called after a workload of training.

        Args:
            total_batches_trained: batches trained after the workload, in all runs.
            logs: the workload's training metrics, as reported to the experiment store
                (over every process's batches unless ``optimizations.average_training_metrics``
                is false).
        """

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Called on the chief while a checkpoint is written, before it is sealed.

        Files written into ``checkpoint_dir`` become part of the checkpoint (and of its
        checksums); do not write into it after this method returns.

        Args:
            checkpoint_dir: the checkpoint's directory.
        """

    def get_state(self) -> Any:
        """The callback's state, saved in every checkpoint; None (the default) saves nothing."""
        return None

    def load_state(self, state: Any) -> None:
        """Restores what :meth:`get_state` returned, when the trial resumes from a checkpoint.

        Args:
            state: the saved state (tuples as lists, tensors as NumPy arrays).
        """

"""TFKerasTrial: the class a user subclasses to train a tf.keras model."""

import abc
from typing import Any, Union

import tensorflow as tf

from det_estimator.errors import TrialDefinitionError
from det_estimator.keras._context import TFKerasTrialContext
from det_estimator.keras._engine._sequences import SequenceAdapter

InputData = Union[tf.keras.utils.Sequence, tf.data.Dataset, SequenceAdapter, tuple]


class TFKerasTrial(abc.ABC):
    """A tf.keras model, its training and validation data, and its callbacks.

    Subclass it and implement :meth:`build_model`, :meth:`build_training_data_loader` and
    :meth:`build_validation_data_loader`; the harness then trains the model in workloads
    of ``scheduling_unit`` batches, validates and checkpoints it on the experiment's
    periods, and resumes it where it stopped, on one process or on several under
    Horovod, exactly as it runs an ``EstimatorTrial``.

    The model runs in TensorFlow 2's eager mode. Training is the model's own
    ``model.fit`` (its train step, custom ones included), run as one long epoch with the
    harness's engine as its callback, which cuts it into workloads, validates,
    checkpoints and pauses between any two batches, and saves the position in the data.

    Args:
        context: this trial's hyperparameters, batch sizes, seed and wrappers.

    Example:
        ::

            class MnistTrial(det.keras.TFKerasTrial):
                def build_model(self):
                    model = self.context.wrap_model(tf.keras.Sequential([...]))
                    optimizer = self.context.wrap_optimizer(tf.keras.optimizers.Adam(self.context.get_hparam("lr")))
                    model.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
                    return model

                def build_training_data_loader(self):
                    return x_train, y_train  # batched by the harness: get_per_slot_batch_size() per process

                def build_validation_data_loader(self):
                    return x_test, y_test
    """

    trial_context_class = TFKerasTrialContext

    def __init__(self, context: TFKerasTrialContext) -> None:
        self.context = context

    @abc.abstractmethod
    def build_model(self) -> tf.keras.Model:
        """Returns the model, passed through ``context.wrap_model()`` and then compiled.

        Wrap the model as soon as it is created, before ``model.compile()``; compile it
        with an optimizer passed through ``context.wrap_optimizer()`` (an optimizer that
        was not is wrapped on several processes, with a warning).
        """

    @abc.abstractmethod
    def build_training_data_loader(self) -> InputData:
        """Returns the training data, in one of five forms.

        1. ``(x, y)``: NumPy arrays (or array-likes), ``x`` also a list of arrays (a
           model with several inputs) or a dict of input name to array; batched by the
           harness into ``context.get_per_slot_batch_size()`` records per process.
        2. ``(x, y, sample_weights)``: the same, with a weight per record.
        3. A ``tf.data.Dataset`` of batches ``(inputs, targets)`` or ``(inputs, targets,
           sample_weights)``, passed through ``context.wrap_dataset()`` right after it is
           created (before batching), so that each process reads its own share.
        4. A ``keras.utils.Sequence`` of such batches (of the per-slot batch size).
        5. A :class:`SequenceAdapter` around such a Sequence, to read it ahead in threads
           or processes.

        The harness repeats the data for as long as the trial trains, shards NumPy
        arrays and Sequences over the processes itself, and resumes each form at the
        batch where it stopped (a ``tf.data`` iterator's state is saved in every
        checkpoint).
        """

    @abc.abstractmethod
    def build_validation_data_loader(self) -> InputData:
        """Returns the validation data, in one of the five forms of :meth:`build_training_data_loader`.

        Each process evaluates its share; the metrics are combined over all of them.
        """

    def session_config(self) -> tf.compat.v1.ConfigProto:
        """TensorFlow settings; in eager mode the harness applies the thread pool sizes and soft placement."""
        return tf.compat.v1.ConfigProto(allow_soft_placement=True)

    def keras_callbacks(self) -> list[tf.keras.callbacks.Callback]:
        """Callbacks to run during training: ``det.keras.callbacks`` ones and plain Keras ones (default: none)."""
        return []


def check_model(model: Any) -> tf.keras.Model:
    """Checks what build_model() returned is a Keras model.

    Raises:
        TrialDefinitionError: it is not a ``tf.keras.Model``.
    """
    if not isinstance(model, tf.keras.Model):
        raise TrialDefinitionError(f"build_model() must return a tf.keras.Model. Received: {type(model).__name__}")
    return model

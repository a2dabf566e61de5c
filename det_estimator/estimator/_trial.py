"""EstimatorTrial: the class a user subclasses to port a tf.estimator model."""

import abc
from typing import Callable, Union

import tensorflow as tf

from det_estimator.estimator._trial_context import EstimatorTrialContext

# What build_serving_input_receiver_fns() maps each name to, under the reference's name
# for it: trials written for the reference annotate their method with it.
ServingInputReceiverFn = Callable[
    ..., Union[tf.estimator.export.ServingInputReceiver, tf.estimator.export.TensorServingInputReceiver]
]


class EstimatorTrial(abc.ABC):
    """A tf.estimator model, its input pipelines and its serving signatures.

    Subclass it and implement :meth:`build_estimator`, :meth:`build_train_spec` and
    :meth:`build_validation_spec`; the harness then trains the model in workloads of
    ``scheduling_unit`` batches, validates and checkpoints it on the experiment's
    periods, and resumes it where it stopped. Create the optimizer and the datasets
    through ``context.wrap_optimizer`` and ``context.wrap_dataset`` so that they work on
    any number of processes.

    ``TrainSpec.max_steps`` is ignored: the experiment's ``searcher.max_length`` decides
    how long the trial trains. The input functions must return a ``tf.data.Dataset``.

    Args:
        context: this trial's hyperparameters, batch sizes, seed and wrappers.

    Example:
        ::

            class LinearTrial(det.EstimatorTrial):
                def build_estimator(self):
                    optimizer = self.context.wrap_optimizer(
                        tf.compat.v1.train.GradientDescentOptimizer(self.context.get_hparam("lr"))
                    )
                    return tf.estimator.LinearRegressor(feature_columns, optimizer=optimizer)

                def build_train_spec(self):
                    return tf.estimator.TrainSpec(self._input_fn(train=True))

                def build_validation_spec(self):
                    return tf.estimator.EvalSpec(self._input_fn(train=False), steps=None)
    """

    trial_context_class = EstimatorTrialContext

    def __init__(self, context: EstimatorTrialContext):
        self.context = context

    @abc.abstractmethod
    def build_estimator(self) -> tf.estimator.Estimator:
        """The Estimator to train and validate: a premade one or a custom ``model_fn``."""

    @abc.abstractmethod
    def build_train_spec(self) -> tf.estimator.TrainSpec:
        """The training input (an ``input_fn`` returning a ``tf.data.Dataset``) and hooks."""

    @abc.abstractmethod
    def build_validation_spec(self) -> tf.estimator.EvalSpec:
        """The validation input; ``steps=None`` evaluates until the input is exhausted."""

    def build_serving_input_receiver_fns(self) -> dict[str, ServingInputReceiverFn]:
        """Serving signatures to export with every checkpoint, by name (default: none).

        Each ``{name: serving_input_receiver_fn}`` entry becomes a SavedModel in the
        checkpoint's ``<name>`` directory, loadable with
        ``det.estimator.load_estimator_from_checkpoint_path(path, serving_name=name)``.
        A name may not be one that another part of the checkpoint takes: ``model`` (the
        TensorFlow checkpoint files), ``input`` (each process's input position),
        ``code``, ``saved_models`` or ``metadata.json``.
        """
        return {}

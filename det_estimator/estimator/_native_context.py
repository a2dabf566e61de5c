"""EstimatorNativeContext: the context ``det.init()`` returns to a script that builds its own Estimator."""

from typing import Any, Callable, Optional

import tensorflow as tf

from det_estimator import core
from det_estimator.config import ExperimentConfig
from det_estimator.estimator._checkpointing import check_serving_names
from det_estimator.estimator._trial import EstimatorTrial
from det_estimator.estimator._trial_context import EstimatorTrialContext


class EstimatorNativeContext(EstimatorTrialContext):
    """A trial context for a script that builds its Estimator itself.

    Everything an ``EstimatorTrial`` gets (``get_hparam``, ``wrap_optimizer``,
    ``wrap_dataset``, ``experimental.make_metric``, ...), plus
    :meth:`train_and_evaluate`, which hands the script's Estimator and specs to the
    harness: workloads, validation, checkpoints, pause and resume, as configured.

    Made by :func:`det_estimator.init`, not directly: it hands over ``run``, which runs
    the trial where ``det.init()`` decided (in this process, or as one launched rank)
    and returns the run's ``TrialOutcome``.

    Attributes:
        serving_input_receiver_fns: ``{name: serving_input_receiver_fn}``, set by the
            script (the reference system's way); each checkpoint then holds one
            SavedModel per entry, as with the argument of :meth:`train_and_evaluate`.
    """

    def __init__(
        self,
        config: ExperimentConfig,
        hparams: dict[str, Any],
        trial_seed: int,
        distributed: Optional[core.DistributedContext],
        run: Callable[[Callable[[core.Context], Any]], Any],
        trial_id: int = 0,
        experiment_id: int = 0,
    ) -> None:
        super().__init__(config, hparams, trial_seed, distributed, trial_id, experiment_id)
        self.serving_input_receiver_fns: dict[str, Callable[[], Any]] = {}
        self._run = run
        self._trained = False

    def train_and_evaluate(
        self,
        estimator: tf.estimator.Estimator,
        train_spec: tf.estimator.TrainSpec,
        eval_spec: tf.estimator.EvalSpec,
        serving_input_receiver_fns: Optional[dict[str, Callable[[], Any]]] = None,
    ) -> Any:
        """Trains and validates ``estimator`` as the experiment config says.

        Like ``tf.estimator.train_and_evaluate``, but training runs in workloads of
        ``scheduling_unit`` batches up to ``searcher.max_length``, with validation and
        checkpoints on their periods, on every process of the experiment.

        Args:
            estimator: the script's Estimator, built with this context's wrappers.
            train_spec: its training input (and hooks, RunHooks included).
            eval_spec: its validation input.
            serving_input_receiver_fns: ``{name: serving_input_receiver_fn}``, added to
                :attr:`serving_input_receiver_fns`; each checkpoint then holds one
                SavedModel per entry.

        Returns:
            The ``TrialOutcome``: final state (COMPLETED, or PAUSED after a pause
            signal), batches trained, validations and checkpoints of this run.

        Raises:
            RuntimeError: called a second time.
        """
        if self._trained:
            raise RuntimeError("train_and_evaluate() runs once per det.init(); call det.init() again for another run.")
        self._trained = True
        serving_input_receiver_fns = serving_input_receiver_fns or {}
        check_serving_names(
            serving_input_receiver_fns, source="train_and_evaluate(serving_input_receiver_fns=...) takes"
        )
        check_serving_names(self.serving_input_receiver_fns, source="context.serving_input_receiver_fns must be")
        self.serving_input_receiver_fns = {**self.serving_input_receiver_fns, **serving_input_receiver_fns}
        trial_class = _trial_of(estimator, train_spec, eval_spec)

        def train(core_context: core.Context) -> Any:
            from det_estimator.estimator._controller import run_estimator_trial

            return run_estimator_trial(trial_class, core_context, context=self)

        return self._run(train)


def _trial_of(estimator, train_spec, eval_spec) -> type:
    """An EstimatorTrial class whose builders return what the script built."""

    class NativeTrial(EstimatorTrial):
        def build_estimator(self) -> tf.estimator.Estimator:
            return estimator

        def build_train_spec(self) -> tf.estimator.TrainSpec:
            return train_spec

        def build_validation_spec(self) -> tf.estimator.EvalSpec:
            return eval_spec

    return NativeTrial

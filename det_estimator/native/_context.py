"""EstimatorNativeContext: the context ``det.init()`` returns to a script."""

import json
from pathlib import Path
from typing import Any, Callable, Optional

import tensorflow as tf

from det_estimator.config import ExperimentConfig
from det_estimator.context import DistributedContext, EstimatorTrialContext
from det_estimator.trial import EstimatorTrial


class EstimatorNativeContext(EstimatorTrialContext):
    """A trial context for a script that builds its Estimator itself.

    Everything an ``EstimatorTrial`` gets (``get_hparam``, ``wrap_optimizer``,
    ``wrap_dataset``, ``experimental.make_metric``, ...), plus
    :meth:`train_and_evaluate`, which hands the script's Estimator and specs to the
    harness: workloads, validation, checkpoints, pause and resume, as configured.

    Made by :func:`det_estimator.init`, not directly.
    """

    def __init__(
        self,
        config: ExperimentConfig,
        hparams: dict[str, Any],
        trial_seed: int,
        distributed: Optional[DistributedContext],
        run: dict[str, Any],
    ) -> None:
        super().__init__(config, hparams, trial_seed, distributed)
        self._run = run
        self._trained = False

    def train_and_evaluate(
        self,
        estimator: tf.estimator.Estimator,
        train_spec: tf.estimator.TrainSpec,
        eval_spec: tf.estimator.EvalSpec,
        serving_input_receiver_fns: Optional[dict[str, Callable[[], Any]]] = None,
    ):
        """Trains and validates ``estimator`` as the experiment config says.

        Like ``tf.estimator.train_and_evaluate``, but training runs in workloads of
        ``scheduling_unit`` batches up to ``searcher.max_length``, with validation and
        checkpoints on their periods, on every process of the experiment.

        Args:
            estimator: the script's Estimator, built with this context's wrappers.
            train_spec: its training input (and hooks, RunHooks included).
            eval_spec: its validation input.
            serving_input_receiver_fns: ``{name: serving_input_receiver_fn}``; each
                checkpoint then holds one SavedModel per entry.

        Returns:
            The ``TrialOutcome``: final state (COMPLETED, or PAUSED after a pause
            signal), batches trained, validations and checkpoints.

        Raises:
            RuntimeError: called a second time.
        """
        if self._trained:
            raise RuntimeError("train_and_evaluate() runs once per det.init(); call det.init() again for another run.")
        self._trained = True
        from det_estimator._run import run_in_this_process

        trial_class = _trial_of(estimator, train_spec, eval_spec, serving_input_receiver_fns or {})
        outcome = run_in_this_process(
            trial_class,
            self._config,
            self._run["checkpoint_dir"],
            distributed=self.distributed,
            test=self._run["test"],
            pause_file=self._run.get("pause_file"),
            record=self._run.get("record"),
            context=self,
        )
        outcome_file = self._run.get("outcome_file")
        if outcome_file and self.distributed.rank == 0:
            Path(outcome_file).write_text(json.dumps(outcome.to_dict()), encoding="utf-8")
        return outcome


def _trial_of(estimator, train_spec, eval_spec, serving_fns) -> type:
    """An EstimatorTrial class whose builders return what the script built."""

    class NativeTrial(EstimatorTrial):
        def build_estimator(self) -> tf.estimator.Estimator:
            return estimator

        def build_train_spec(self) -> tf.estimator.TrainSpec:
            return train_spec

        def build_validation_spec(self) -> tf.estimator.EvalSpec:
            return eval_spec

        def build_serving_input_receiver_fns(self) -> dict[str, Callable[[], Any]]:
            return serving_fns

    return NativeTrial

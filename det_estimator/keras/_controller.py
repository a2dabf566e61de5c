"""TFKerasTrialController: runs one TFKerasTrial on this process, as one rank of the job, on the Core API."""

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator import core
from det_estimator._process_random_state import python_and_numpy_state
from det_estimator._trial_controller import TrialController, new_trial_context
from det_estimator.core._metrics import combine_across_ranks
from det_estimator.errors import TrialLifecycleError
from det_estimator.keras._context import TFKerasTrialContext
from det_estimator.keras._devices import apply_session_config, pin_local_gpu, require_eager
from det_estimator.keras._engine import _callback_states, _format, _inputs, _keras_compat, _random_states
from det_estimator.keras._engine._callbacks import TrialCallbacks
from det_estimator.keras._engine._metrics import global_metrics, local_metrics, read_combined
from det_estimator.keras._engine._position import Position
from det_estimator.keras._engine._schedule import WorkloadSchedule
from det_estimator.keras._engine._tap import Tap, one_step_per_execution
from det_estimator.keras._reducer_metric import ReducerMetric
from det_estimator.keras._trial import TFKerasTrial, check_model
from det_estimator.store import State

logger = logging.getLogger("det_estimator.keras")


class TFKerasTrialController(TrialController):
    """Trains, validates and checkpoints one ``TFKerasTrial`` on this process.

    Every rank of the job runs one controller; rank 0 (the chief) writes the
    checkpoints, every rank its own position in a tf.data input. All ranks take the
    same decisions from the same inputs: batch counts, metrics combined over all ranks,
    and pause and stop flags summed over all ranks in every training step. Metrics,
    checkpoints, pauses and lengths all go through the trial's core context, as for an
    ``EstimatorTrial``.

    Training drives the model's own train function (what ``model.fit`` runs per batch)
    in workloads of ``scheduling_unit`` batches, from an iterator the controller owns,
    so that it can validate and checkpoint between any two batches and save where the
    data stands.

    Args:
        trial_class: the user's ``TFKerasTrial`` subclass.
        core_context: the trial's core context on this process.
        context: the trial's context, when it exists before the trial; by default a new one.
    """

    def __init__(
        self,
        trial_class: type,
        core_context: core.Context,
        context: Optional[TFKerasTrialContext] = None,
    ) -> None:
        if not (isinstance(trial_class, type) and issubclass(trial_class, TFKerasTrial)):
            raise TypeError(f"Argument `trial_class` must be a subclass of TFKerasTrial. Received: {trial_class!r}")
        super().__init__(core_context)
        self._trial_class = trial_class
        self.context = context or new_trial_context(TFKerasTrialContext, core_context)
        # Batches of the global input stream read before this run, and this run's first batch.
        self._start_position = 0
        self._start_batches = 0
        self._saved_callback_states: Optional[list[dict[str, Any]]] = None

    def run(self) -> State:
        """Runs the trial to its end (or to a pause); returns COMPLETED or PAUSED."""
        require_eager()
        pin_local_gpu(self._distributed.local_rank)
        previous_setting = _random_states.use_generators_in_layers()
        _random_states.seed_everything(self._seed)
        try:
            trial = self._trial_class(self.context)
            apply_session_config(trial.session_config())
            self._model = self._built_model(trial)
            self._train_data = _inputs.training_data(trial.build_training_data_loader(), self.context)
            self._validation = _inputs.validation_data(trial.build_validation_data_loader(), self.context, self._test)
            self._callbacks = TrialCallbacks(
                trial.keras_callbacks(),
                self._model,
                self._batches_per_epoch(),
                tensorboard_dir=_string_or_none(self._core.train.get_tensorboard_path()),
                rank=self._distributed.rank,
            )
            self._check_exact_metrics_run_compiled()
            options = _format.CheckpointOptions(
                "TFKerasTrial", saved_model=True, callbacks=True, iterators=self._train_data.saves_iterator
            )
            self._writer = _format.CheckpointWriter(self._core, self._model, options)
            self._step = Tap(self._model, self._distributed.size)
            iterator = self._resume()
            max_batches = self._start_operations()
            if max_batches is not None:
                self._train(iterator, max_batches)
        finally:
            for data in ("_train_data", "_validation"):
                if hasattr(self, data):
                    getattr(self, data).close()
            _random_states.restore_layer_setting(previous_setting)
        return self._state

    def _built_model(self, trial: TFKerasTrial) -> tf.keras.Model:
        model = check_model(trial.build_model())
        if not self.context.is_wrapped_model(model):
            raise TrialLifecycleError(
                "build_model() returned a model that never went through context.wrap_model(). Wrap the model right "
                "after creating it, then compile it: model = self.context.wrap_model(model); model.compile(...)."
            )
        if not _keras_compat.is_compiled(model):
            raise TrialLifecycleError(
                "build_model() returned a model that is not compiled: call model.compile(optimizer, loss, ...) "
                "in build_model() after context.wrap_model(model)."
            )
        if not self.context.is_wrapped_optimizer(model.optimizer):
            raise TrialLifecycleError(
                f"The model was compiled before context.wrap_model(), so its optimizer does not average gradients "
                f"over the {self._distributed.size} processes. Wrap the model before compiling it, or compile it with "
                "an optimizer from context.wrap_optimizer(optimizer)."
            )
        return model

    def _check_exact_metrics_run_compiled(self) -> None:
        # Before the first step Keras lists no compiled metric yet: look at what compile() was given.
        given = _keras_compat.metrics_given_to_compile(self._model)
        exact = any(isinstance(metric, ReducerMetric) for metric in given)
        if self._distributed.size > 1 and self._model.run_eagerly and exact:
            raise TrialLifecycleError(
                "The model is compiled with run_eagerly=True and has ReducerMetric metrics: on several processes "
                "their values are exchanged when Keras reads them, which it would do after every batch of each "
                "process. Compile without run_eagerly."
            )

    def _batches_per_epoch(self) -> Optional[int]:
        records = self._config.records_per_epoch
        return max(1, records // self.context.get_global_batch_size()) if records else None

    # Resuming.

    def _resume(self) -> Iterator:
        """The training iterator at this trial's position, with the model, callbacks and random states restored."""
        size = self._distributed.size
        if self._latest_checkpoint is None:
            iterator = self._train_data.start(0, 0, None, size)
            self._build(iterator)
            return iterator
        with self._core.checkpoint.restore_path(self._latest_checkpoint) as path:
            state = _format.read(path)
            position = Position.saved(state.position)
            self._batches = self._last_checkpoint = self._start_batches = position.steps_completed
            data_position = position.data_position
            self._start_position = self._batches * size if data_position is None else data_position
            self._best_metric = state.position["best_validation_metric"]
            last_validation = state.position["last_validation_batches"]
            self._last_validation = -1 if last_validation is None else int(last_validation)
            saved = (path, position.slots or size)
            iterator = self._train_data.start(self._start_position, self._batches, saved, size)
            self._build(iterator)
            _format.restore_variables(state, self._model, with_optimizer=True, strict=True)
            self._saved_callback_states = state.callback_states()
            # Last: building the data and the model may draw random numbers of their own.
            _format.restore_random_states(state, self._model, self._distributed.rank)
        return iterator

    def _build(self, iterator: Iterator) -> None:
        """Creates every variable before training, so that a checkpoint restores them all at once."""
        for data in (self._train_data, self._validation):
            if data.first_batch is not None and not self._model.built:
                # Sequences' batches have no static shape: build on a real batch, as model.fit does.
                self._model(data.first_batch[0], training=False)
        self._step.trace(iterator)

    # Training.

    def _train(self, iterator: Iterator, max_batches: int) -> None:
        self._iterator = iterator
        self._model.stop_training = False
        self._callbacks.on_train_begin(self._batches)
        if self._saved_callback_states is not None:
            _callback_states.load_states(self._saved_callback_states, self._callbacks.stateful)
        if self._config.perform_initial_validation and self._batches == 0 and not self._test:
            self._validate()
        global_batch_size = self.context.get_global_batch_size()
        schedule = WorkloadSchedule(self, self._config, global_batch_size, self._test, max_batches)
        preempt, model = self._core.preempt, self._model
        going = True
        while going:
            batches = schedule.batches_for_step(self._step.batches_per_call)
            self._callbacks.on_train_batch_begin(self._batches)
            logs, pause, stop = self._step(iterator, batches, preempt.requested_locally(), model.stop_training)
            self._batches += batches
            self._callbacks.on_train_batch_end(self._batches, batches, logs)
            self._core.train.report_batches(self._batches)
            if self._distributed.size == 1:  # no agreement to wait for: what the callbacks just did counts
                pause, stop = preempt.requested_locally(), model.stop_training
            going = schedule.after_step(batches, pause, stop)
        self._callbacks.on_train_end()

    # What the schedule asks of the trial (WorkloadSchedule's TrialSteps).

    @property
    def batches(self) -> int:
        return self._batches

    @property
    def last_validation(self) -> int:
        return self._last_validation

    @property
    def last_checkpoint(self) -> int:
        return self._last_checkpoint

    def begin_workload(self, requested: int) -> None:
        self._callbacks.on_train_workload_begin(self._batches, requested)
        self._model.reset_metrics()

    def batches_to_epoch_end(self) -> Optional[int]:
        return self._callbacks.batches_to_epoch_end(self._batches)

    def end_workload(self) -> None:
        self._callbacks.on_train_workload_end(self._batches, self._report_training())

    def validation_due(self, stopping: str) -> bool:
        return self._validation_due(stopping)

    def validate(self) -> dict[str, Any]:
        return self._validate()

    def stop_requested(self) -> bool:
        return self._stop_requested()

    def checkpoint_due(self, metrics: Optional[dict[str, Any]]) -> bool:
        return self._checkpoint_due(metrics)

    def checkpoint(self, metrics: Optional[dict[str, Any]]) -> None:
        self._checkpoint(self._iterator, metrics)

    def pause_asked_meanwhile(self, stopping: str, validated: bool, checkpointed: bool) -> bool:
        return self._pause_asked_meanwhile(stopping, validated, checkpointed)

    def next_operation(self) -> Optional[int]:
        return self._next_operation()

    def pause(self) -> None:
        self._pause()

    def exit_early(self) -> None:
        self._core.train.report_early_exit(core.EarlyExitReason.USER_REQUESTED_STOP)

    def _stop_requested(self) -> bool:
        """Whether a callback (EarlyStopping, say) set ``model.stop_training`` on any process in the validation."""
        stop = bool(self._model.stop_training)
        return any(self._distributed.allgather(stop)) if self._distributed.size > 1 else stop

    # Metrics.

    def _report_training(self) -> dict[str, Any]:
        """Records the workload's training metrics over every rank's batches (or the chief's alone); returns them.

        Keras' metrics hold their state over the workload's batches (the loss included);
        the ranks' states are summed as the core's metric policy says, and
        ``ReducerMetric`` values are already computed over every rank's batches. With
        ``optimizations.average_training_metrics: false`` each rank reports its own
        Keras metrics, with no collective (the chief's are recorded).
        """
        across_ranks = self._config.optimizations.average_training_metrics
        metrics = _to_json(global_metrics(self._model, self._distributed, across_ranks=across_ranks))
        self._core.train.report_training_metrics(self._batches, metrics)
        if self.context.fit_config.verbose and self._is_chief:
            print(f"[keras] {self._batches} batches: {_shown(metrics)}", flush=True)
        return metrics

    def _validate(self) -> dict[str, Any]:
        self._validation.reset_count()
        with one_step_per_execution(self._model):
            local = self._model.evaluate(
                self._validation.dataset,
                steps=self._validation.steps,
                callbacks=self._callbacks.for_evaluate,
                verbose=0,
                return_dict=True,
            )
        mine = local_metrics(self._model, local, self._validation.examples)
        combined = combine_across_ranks(mine, self._distributed)
        if combined.examples == 0:
            raise TrialLifecycleError("Validation saw no example on any process: check build_validation_data_loader().")
        logs = _to_json(read_combined(self._model, combined))
        metrics = {f"val_{name}": value for name, value in logs.items()}
        self._record_validation(metrics)
        self._callbacks.on_test_end(logs)
        if self.context.fit_config.verbose and self._is_chief:
            print(f"[keras] validation after {self._batches} batches: {_shown(metrics)}", flush=True)
        return metrics

    # Checkpoints.

    def _checkpoint(self, iterator: Iterator, metrics: Optional[dict[str, Any]]) -> None:
        size = self._distributed.size
        # Each process's own: the model's variables hold the chief's generators only.
        own = {
            **python_and_numpy_state(),
            "generators": _random_states.generator_states(_random_states.all_generators(self._model)),
        }
        self._last_checkpoint = self._batches
        per_epoch = self._batches_per_epoch()
        position = Position(
            self._batches,
            epoch=self._batches // per_epoch if per_epoch else None,
            batch=self._batches % per_epoch if per_epoch else None,
            data_position=self._start_position + (self._batches - self._start_batches) * size,
            slots=size,
        )
        trial = {
            "batches_trained": self._batches,
            "best_validation_metric": self._best_metric,
            "last_validation_batches": self._last_validation,
        }
        metadata = {"trial_seed": self._seed, "hparams": self._hparams, "config": self._config.to_dict()}
        if metrics is not None:
            metadata["validation_metrics"] = metrics

        def chief(path: Path) -> None:
            self._callbacks.on_checkpoint_end(str(path))
            _callback_states.write_states(path, self._callbacks.stateful)  # last: as on_checkpoint_end left them

        self._writer.write(
            {**position.metadata(), **trial},
            own,
            metadata=metadata,
            every_process=lambda path: self._train_data.save(iterator, path),
            chief=chief,
        )


def _to_json(logs: dict[str, Any]) -> dict[str, Any]:
    """Keras logs (tensors, NumPy values) as JSON values: scalars as int or float, arrays as lists."""
    converted = {}
    for key, value in logs.items():
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if array.ndim:
            converted[key] = array.tolist()
        else:
            converted[key] = array.item() if array.dtype.kind in "iub" else float(array)
    return converted


def _shown(metrics: dict[str, Any]) -> str:
    return ", ".join(
        f"{key} {value:.6g}" if isinstance(value, float) else f"{key} {value}" for key, value in metrics.items()
    )


def _string_or_none(path: Optional[Path]) -> Optional[str]:
    return None if path is None else str(path)

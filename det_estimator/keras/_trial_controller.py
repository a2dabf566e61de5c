"""TFKerasTrialController: runs one TFKerasTrial on this process, as one rank of the job, on the Core API."""

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from det_estimator import _horovod, core
from det_estimator._process_random_state import python_and_numpy_state
from det_estimator._trial_controller import TrialController, new_trial_context
from det_estimator.core._metrics import combine_across_ranks
from det_estimator.errors import TrialLifecycleError
from det_estimator.keras._context import TFKerasTrialContext
from det_estimator.keras._devices import apply_session_config, pin_local_gpu, require_eager
from det_estimator.keras._engine import _callback_states, _format, _inputs, _keras_compat, _random_states, _sharding
from det_estimator.keras._engine._callbacks import TrialCallbacks
from det_estimator.keras._engine._loop import FOREVER, TrialEngine
from det_estimator.keras._engine._metrics import global_metrics, local_metrics, read_combined
from det_estimator.keras._engine._position import Position, Resumed
from det_estimator.keras._engine._schedule import WorkloadSchedule
from det_estimator.keras._engine._tap import Tap, one_step_per_execution
from det_estimator.keras._reducer_metric import ReducerMetric
from det_estimator.keras._trial import TFKerasTrial, check_model
from det_estimator.store import State

logger = logging.getLogger("det_estimator.keras")

_NO_VALIDATION_EXAMPLE = "Validation saw no example on any process: check build_validation_data_loader()."


def run_keras_trial(
    trial_class: type, core_context: core.Context, context: Optional[TFKerasTrialContext] = None
) -> State:
    """Builds ``trial_class``'s trial and runs it to its end (or to a pause); returns COMPLETED or PAUSED.

    Seeds the process with the trial's seed (with random generators in Keras' layers, so
    that a resumed trial draws what an uninterrupted one would), builds the trial and
    its parts, and runs its controller; the data readers and the checkpoint it resumed
    from are released at the end.

    Args:
        trial_class: the user's ``TFKerasTrial`` subclass.
        core_context: the trial's core context on this process.
        context: the trial's context, when it exists before the trial; by default a new one.

    Raises:
        TypeError: ``trial_class`` is not a ``TFKerasTrial`` subclass.
    """
    if not (isinstance(trial_class, type) and issubclass(trial_class, TFKerasTrial)):
        raise TypeError(f"Argument `trial_class` must be a subclass of TFKerasTrial. Received: {trial_class!r}")
    context = context or new_trial_context(TFKerasTrialContext, core_context)
    require_eager()
    pin_local_gpu(core_context.distributed.local_rank)
    previous_setting = _random_states.use_generators_in_layers()
    try:
        _random_states.seed_everything(core_context.info.require_trial().trial_seed)
        with contextlib.ExitStack() as resources:
            built = BuiltTrial.of(trial_class(context), context, core_context.info.test_mode, resources)
            return TFKerasTrialController(core_context, context, built, resources).run()
    finally:
        _random_states.restore_layer_setting(previous_setting)


@dataclass(frozen=True)
class BuiltTrial:
    """What a ``TFKerasTrial`` builds, checked: everything its controller runs.

    Attributes:
        model: the wrapped, compiled model.
        training: this process's training data.
        validation: this process's validation data.
        callbacks: what ``keras_callbacks()`` returned.
    """

    model: tf.keras.Model
    training: _inputs.TrainingData
    validation: _inputs.ValidationData
    callbacks: Any

    @classmethod
    def of(
        cls, trial: TFKerasTrial, context: TFKerasTrialContext, test: bool, resources: contextlib.ExitStack
    ) -> "BuiltTrial":
        """Calls the trial's builders and checks what they return; the data's readers are closed with ``resources``.

        Raises:
            TrialLifecycleError: the model is not wrapped and compiled as the harness needs.
            DataError: a data loader returned something the harness cannot read.
        """
        apply_session_config(trial.session_config())
        model = _checked_model(trial.build_model(), context)
        training = _inputs.training_data(trial.build_training_data_loader(), context)
        resources.callback(training.close)
        validation = _inputs.validation_data(trial.build_validation_data_loader(), context, test)
        resources.callback(validation.close)
        return cls(model, training, validation, trial.keras_callbacks())


def _checked_model(model: Any, context: TFKerasTrialContext) -> tf.keras.Model:
    model = check_model(model)
    if not context.is_wrapped_model(model):
        raise TrialLifecycleError(
            "build_model() returned a model that never went through context.wrap_model(). Wrap the model right "
            "after creating it, then compile it: model = self.context.wrap_model(model); model.compile(...)."
        )
    if not _keras_compat.is_compiled(model):
        raise TrialLifecycleError(
            "build_model() returned a model that is not compiled: call model.compile(optimizer, loss, ...) "
            "in build_model() after context.wrap_model(model)."
        )
    if not context.is_wrapped_optimizer(model.optimizer):
        raise TrialLifecycleError(
            f"The model was compiled before context.wrap_model(), so its optimizer does not average gradients "
            f"over the {context.distributed.size} processes. Wrap the model before compiling it, or compile it with "
            "an optimizer from context.wrap_optimizer(optimizer)."
        )
    return model


class TFKerasTrialController(TrialController):
    """Trains, validates and checkpoints one built ``TFKerasTrial`` on this process.

    Every rank of the job runs one controller; rank 0 (the chief) writes the
    checkpoints, every rank its own position in a tf.data input. All ranks take the
    same decisions from the same inputs: batch counts, metrics combined over all ranks,
    and pause and stop flags summed over all ranks in every training step. Metrics,
    checkpoints, pauses and lengths all go through the trial's core context, as for an
    ``EstimatorTrial``.

    Training is the model's own ``model.fit``, one endless epoch with the engine
    (``_engine._loop.TrialEngine``) as its callback, which cuts it into workloads of
    ``scheduling_unit`` batches (a :class:`WorkloadSchedule`) and validates, checkpoints
    and pauses between any two batches; a tf.data input's position is its iterator's
    state, saved in every checkpoint. The controller is built at the trial's position,
    its variables restored: :meth:`run` only trains. :func:`run_keras_trial` builds it.

    Args:
        core_context: the trial's core context on this process.
        context: the trial's context.
        built: what the trial built.
        resources: released when the run ends; the checkpoint resumed from stays open in it
            until then (variables made by the first step and the first iterator's state
            are read from it then).
    """

    def __init__(
        self,
        core_context: core.Context,
        context: TFKerasTrialContext,
        built: BuiltTrial,
        resources: contextlib.ExitStack,
    ) -> None:
        super().__init__(core_context)
        self.context = context
        self._model = built.model
        self._train_data = built.training
        self._validation = built.validation
        self._callbacks = TrialCallbacks(
            built.callbacks,
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
        # Horovod's processes agree on stopping in the training step; a strategy's, in the engine (see TrialEngine).
        self._tap = Tap(self._model, self._distributed.size if _horovod.is_distributed() else 1)
        # Batches of the global input stream read before this run, and this run's first batch.
        self._start_position = 0
        self._start_batches = 0
        self._saved_callback_states: Optional[list[dict[str, Any]]] = None
        self._restored: Any = None
        self._training_stream, first_iterator = self._resume(resources)
        self._schedule = WorkloadSchedule(self)
        self._engine = TrialEngine(self, self._schedule, self._tap, self._callbacks, self._core, first_iterator)

    def run(self) -> State:
        """Runs the trial to its end (or to a pause); returns COMPLETED or PAUSED."""
        max_batches = self._start_operations()
        if max_batches is not None:
            self._schedule.start(max_batches)
            self._model.fit(
                _sharding.per_worker(self._model, self._training_stream),
                steps_per_epoch=FOREVER,
                epochs=1,
                # The trial's own callbacks are the engine's to call, at the trial's points.
                callbacks=_keras_compat.untimed_callbacks([self._engine], self._model),
                verbose=0,
                shuffle=False,
            )
        return self._state

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

    def _resume(self, resources: contextlib.ExitStack) -> Resumed:
        """The training dataset at this trial's position, with the model, callbacks and random states restored.

        Returns the dataset and what restores the saved state into the first iterator
        ``fit`` makes of it (a tf.data input's position), if anything.
        """
        size = self._distributed.size
        if self._latest_checkpoint is None:
            stream = self._train_data.stream(0, 0, None, size)
            self._build(stream[0])
            return stream
        path = resources.enter_context(self._core.checkpoint.restore_path(self._latest_checkpoint))
        state = _format.read(path)
        position = Position.saved(state.position)
        self._batches = self._last_checkpoint = self._start_batches = position.steps_completed
        data_position = position.data_position
        self._start_position = self._batches * size if data_position is None else data_position
        self._best_metric = state.position["best_validation_metric"]
        last_validation = state.position["last_validation_batches"]
        self._last_validation = -1 if last_validation is None else int(last_validation)
        saved = (path, position.slots or size)
        stream = self._train_data.stream(self._start_position, self._batches, saved, size)
        self._build(stream[0])
        # Variables a model run eagerly creates in its first step are read when it creates them.
        self._restored = _format.restore_variables(state, self._model, with_optimizer=True, strict=True)
        self._saved_callback_states = state.callback_states()
        # Last: building the data and the model may draw random numbers of their own.
        _format.restore_random_states(state, self._model, self._distributed.rank)
        return stream

    def _build(self, dataset: tf.data.Dataset) -> None:
        """Creates every variable before training, so that a checkpoint restores them all at once."""
        for data in (self._train_data, self._validation):
            if data.first_batch is not None and not self._model.built:
                # Sequences' batches have no static shape: build on a real batch, as model.fit does.
                self._model(data.first_batch[0], training=False)
        self._tap.trace(dataset)

    # What the engine and the schedule ask of the trial (the engine's and WorkloadSchedule's TrialSteps).

    def begin_training(self) -> None:
        """Training (re)starts: the callbacks begin, with their saved states, and the initial validation if due."""
        self._callbacks.on_train_begin(self._batches)
        if self._saved_callback_states is not None:
            _callback_states.load_states(self._saved_callback_states, self._callbacks.stateful)
        if self._config.perform_initial_validation and self._batches == 0 and not self._test:
            self._validate()

    def count_batches(self, batches: int) -> None:
        """A step trained ``batches`` batches."""
        self._batches += batches

    def end_training(self) -> None:
        """Training ended (completed, paused or stopped)."""
        self._callbacks.on_train_end()

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
        self._checkpoint(self._engine.fit_iterator, metrics)

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
        # Under a strategy of several workers each evaluates its own share (its shorter share
        # ends in empty batches), and the model's metrics are read over every worker's.
        spans_processes = _keras_compat.strategy_spans_processes(self._model)
        with one_step_per_execution(self._model):
            dataset, steps = self._validation.dataset, self._validation.steps
            if spans_processes:
                # Each step is a collective: every worker runs until the longest share ends, not
                # its own share's count of batches. Keras 2 evaluates a distributed dataset only
                # for a number of steps: the pass ends first.
                steps = FOREVER
            local = self._model.evaluate(
                _sharding.per_worker(self._model, dataset, like=self._validation.first_batch),
                steps=steps,
                callbacks=self._callbacks.for_evaluate,
                verbose=0,
                return_dict=True,
            )
        if spans_processes:
            if not sum(self._distributed.allgather(self._validation.examples)):
                raise TrialLifecycleError(_NO_VALIDATION_EXAMPLE)
            logs = _to_json(global_metrics(self._model, self._distributed, local))
        else:
            mine = local_metrics(self._model, local, self._validation.examples)
            combined = combine_across_ranks(mine, self._distributed)
            if combined.examples == 0:
                raise TrialLifecycleError(_NO_VALIDATION_EXAMPLE)
            logs = _to_json(read_combined(self._model, combined))
        metrics = {f"val_{name}": value for name, value in logs.items()}
        self._record_validation(metrics)
        self._callbacks.on_test_end(logs)
        if self.context.fit_config.verbose and self._is_chief:
            print(f"[keras] validation after {self._batches} batches: {_shown(metrics)}", flush=True)
        return metrics

    # Checkpoints.

    def _checkpoint(self, iterator: Any, metrics: Optional[dict[str, Any]]) -> None:
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

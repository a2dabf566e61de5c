"""The fit loop's driver: the engine that every Keras front end runs inside ``model.fit``.

:class:`Engine` is a Keras callback. Keras' own ``model.fit`` drives the batches; the
engine counts them (epochs and batches in them, and batches in all, over every run),
reports training and validation metrics over every process's data, writes checkpoints
in the one format (``_format``), asks whether to pause and stops ``fit`` there, and
resumes a ``fit`` at the epoch and batch of its checkpoint (``_position.Replay``) with
its random states. *When* it does each is its schedule's (``_schedule``): a script's
periods (``DeterminedCallback``, ``context.fit``).

:class:`TrialEngine` is the same driver for a ``TFKerasTrial``'s ``fit``, one endless
epoch: a ``WorkloadSchedule`` cuts it into workloads, and the trial's controller
validates, checkpoints and pauses where the schedule says, between any two batches.
"""

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

import tensorflow as tf

from det_estimator import _heartbeat, core
from det_estimator._process_random_state import python_and_numpy_state
from det_estimator.keras._engine import _format, _keras_compat, _random_states
from det_estimator.keras._engine._callbacks import TrialCallbacks
from det_estimator.keras._engine._metrics import GlobalMetrics, global_metrics, numbers_of, with_searcher_metric
from det_estimator.keras._engine._position import Position, Replay
from det_estimator.keras._engine._schedule import EpochSchedule, TrialSteps, WorkloadSchedule
from det_estimator.keras._engine._tap import Tap

logger = logging.getLogger("det_estimator.keras")


class Engine(tf.keras.callbacks.Callback):
    """Metrics, checkpoints, pause and resume of the ``model.fit`` it is a callback of.

    Every process of the job runs one, with the same arguments; see
    :class:`~det_estimator.keras.DeterminedCallback`, which is one, for what it does.

    Args:
        core_context: the run's core context.
        schedule: when it reports, checkpoints and asks whether to pause.
        checkpoint: the storage id of a checkpoint to start from, or None.
        continue_id: saved with every checkpoint; a checkpoint of the same id is
            continued where it stopped, one of another is a warm start.
    """

    # What its checkpoints' metadata names as their writer.
    _written_by = "DeterminedCallback"

    def __init__(
        self,
        core_context: core.Context,
        schedule: EpochSchedule,
        checkpoint: Optional[str] = None,
        continue_id: Union[int, str, None] = None,
    ) -> None:
        super().__init__()
        self._core = core_context
        self._schedule = schedule
        self._checkpoint = checkpoint
        self._continue_id = continue_id
        # The storage id of the latest checkpoint this engine wrote.
        self.last_checkpoint: Optional[str] = None
        # The metrics of every process's data; context.fit shares one that comes first among its callbacks.
        self._metrics = GlobalMetrics(core_context.distributed)
        self._owns_metrics = True
        # Keras hands the logs over as tensors; they are read only when reported, so that
        # the engine adds no synchronisation to the batches between reports.
        self._supports_tf_logs = True
        self._reset_position()

    def _reset_position(self) -> None:
        self._steps_completed = 0  # batches trained since the start of training, over every run
        self._epoch = 0  # the epoch being trained
        self._batch = 0  # batches trained in it
        # What to add to fit's batch index in this epoch: Keras 3 counts a resumed epoch's batches from 0.
        self._batch_offset = 0
        self._epoch_start_steps = 0
        self._last_checkpoint_steps: Optional[int] = None
        self._last_training_report: Optional[int] = None
        self._preempted = False
        self._resume_status: Any = None
        self._tap: Optional[Tap] = None
        self._replay: Optional[Replay] = None
        self._writer: Optional[_format.CheckpointWriter] = None
        self._steps_per_epoch: Optional[int] = None
        self._epochs: Optional[int] = None
        # Python's and NumPy's random states when the current epoch began: Keras shuffles a
        # Sequence's batches with Python's random when it starts reading an epoch.
        self._epoch_random_state: Optional[dict[str, Any]] = None

    def set_model(self, model: tf.keras.Model) -> None:
        super().set_model(model)
        if self._owns_metrics:
            self._metrics.set_model(model)

    def share_metrics(self, metrics: GlobalMetrics) -> None:
        """Takes the global metrics from ``metrics``, a callback that comes first in the same ``fit``.

        Then every callback between the two sees the global values too; ``metrics`` is
        driven by Keras, not by this callback.
        """
        self._metrics = metrics
        self._owns_metrics = False

    @property
    def _started_tap(self) -> Tap:
        """The tap of the fit under way (``on_train_begin`` makes it)."""
        if self._tap is None:
            raise RuntimeError("DeterminedCallback was called back before model.fit began training (on_train_begin).")
        return self._tap

    @property
    def _started_writer(self) -> _format.CheckpointWriter:
        """The checkpoint writer of the fit under way (``on_train_begin`` makes it)."""
        if self._writer is None:
            raise RuntimeError("DeterminedCallback was called back before model.fit began training (on_train_begin).")
        return self._writer

    # ----- start and resume -----

    def on_train_begin(self, logs: Optional[dict[str, Any]] = None) -> None:
        if self._owns_metrics:
            self._metrics.on_train_begin(logs)
        model = self.model
        if getattr(model, "optimizer", None) is None:
            raise ValueError("DeterminedCallback needs a compiled model: call model.compile() before model.fit().")
        if _keras_compat.executions_of_several_batches_fail(model):
            raise ValueError(
                f"The model is compiled with steps_per_execution={_keras_compat.batches_per_execution(model)}, and "
                "Keras 3's model.fit fails with more than one step per execution under a MultiWorkerMirroredStrategy "
                "of several workers. Compile with steps_per_execution=1 there, or run tf-keras "
                "(TF_USE_LEGACY_KERAS=1); a TFKerasTrial trains such a model under the strategy."
            )
        if _keras_compat.fit_start(model) is not None:
            raise ValueError(
                "DeterminedCallback cannot be combined with tf.keras.callbacks.BackupAndRestore: both restore the "
                "position of model.fit. Remove BackupAndRestore; the callback's checkpoints resume training."
            )
        self._reset_position()
        # A save_model of the script's own writes the variables; the engine's writer otherwise.
        save_variables = self.save_model if _overrides(self, "save_model") else None
        options = _format.CheckpointOptions(self._written_by, save_variables=save_variables)
        self._writer = _format.CheckpointWriter(self._core, model, options)
        self._tap = Tap(model)
        self._steps_per_epoch = self.params.get("steps")
        self._epochs = self.params.get("epochs")
        if self._checkpoint is not None:
            self._restore(self._checkpoint)
        # fit() starts reading the first epoch after on_train_begin: from this state.
        self._epoch_random_state = python_and_numpy_state()
        total = self._epochs * self._steps_per_epoch if self._epochs and self._steps_per_epoch else None
        self._core.train.report_start(self._steps_completed, total)

    def _restore(self, storage_id: str) -> None:
        with self._core.checkpoint.restore_path(storage_id) as path:
            state = _format.read(Path(path))
            position = Position.saved(state.position)
            continuing = self._continue_id is not None and position.continue_id == self._continue_id
            self._load_weights(state, with_optimizer=continuing)
        if not continuing:
            logger.info("starting from the weights of checkpoint %s (a new training: continue_id differs)", storage_id)
            return
        epoch, batch = position.epoch or 0, position.batch or 0
        self._steps_completed = position.steps_completed
        self._last_checkpoint_steps = self._steps_completed
        self._epoch, self._batch = epoch, batch
        self._batch_offset = batch - _keras_compat.first_batch_index_of_resumed_epoch(batch)
        self._epoch_start_steps = self._steps_completed - batch
        # The resumed epoch draws its order (and the user's own draws) as the interrupted one did:
        # Python's and NumPy's states are those of the epoch's start.
        _format.restore_random_states(state, self.model, self._core.distributed.rank)
        # fit() asks the model where to start right after on_train_begin.
        self._replay = Replay(epoch, batch, self._steps_per_epoch)
        self._replay.start(self.model, self._tap)
        logger.info("continuing from checkpoint %s at epoch %d, batch %d", storage_id, epoch, batch)

    def _load_weights(self, state: _format.SavedState, with_optimizer: bool) -> None:
        model = self.model
        if with_optimizer and model.built:
            # Create the optimizer's slots now, so that their values are restored at once
            # rather than when the first batch creates them.
            with model.distribute_strategy.scope():
                _keras_compat.build_optimizer(model.optimizer, model.trainable_variables)
        if with_optimizer:
            # The dropout masks go on where the checkpoint stopped: the layers' generators
            # must exist to be restored.
            with model.distribute_strategy.scope():
                _random_states.create_layer_generators(model)
            _random_states.warn_of_layers_without_generators(model)
        if _overrides(self, "load_model"):
            self.load_model(model, state.variables, self._core.distributed)
            return
        # Variables created later (an unbuilt model) are restored when they are created:
        # keep the reading alive until then. A warm start reads the weights alone.
        self._resume_status = _format.restore_variables(state, model, with_optimizer=with_optimizer)

    # ----- what a script may override -----

    def save_model(self, model: tf.keras.Model, path: str, distributed: core.DistributedContext) -> None:
        """Writes the model's variables at the prefix ``path`` of the checkpoint being written.

        Override it to save the model otherwise (with :meth:`load_model` to read it back),
        as the reference system's ``DeterminedCallback`` allows. Every process calls it
        at every checkpoint: the chief with ``<checkpoint>/model_checkpoint``, the others
        with a path in a directory thrown away afterwards (under a ``tf.distribute``
        strategy of several workers every process must write, as TensorFlow requires).
        The default writes what ``model.save_weights(path)`` writes (the model, its
        optimizer with it) with the random generators attached, so that
        ``model.load_weights(<checkpoint>/model_checkpoint)`` loads a trained model.

        Args:
            model: the model being trained.
            path: the prefix to write at.
            distributed: the core context's ``distributed``: this process's rank, and collectives.
        """
        del model, distributed  # the writer holds the model; it knows the ranks
        self._started_writer.save_variables(path)

    def load_model(self, model: tf.keras.Model, path: str, distributed: core.DistributedContext) -> None:
        """Reads the model's variables from the prefix ``path`` of the checkpoint training starts from.

        Override it together with :meth:`save_model`. Every process calls it, in
        ``on_train_begin``, with ``<checkpoint>/model_checkpoint``. When it is not
        overridden the callback reads the checkpoint itself, in any of its layouts
        (only the weights for a warm start, where ``continue_id`` differs); this default,
        for an override that calls it, reads everything :meth:`save_model`'s default wrote.

        Args:
            model: the model being trained.
            path: the prefix to read from.
            distributed: the core context's ``distributed``.
        """
        del distributed
        _format.read_variables(model, path)

    # ----- epochs and batches -----

    def on_epoch_begin(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
        if self._owns_metrics:
            self._metrics.on_epoch_begin(epoch, logs)
        if self._replay is not None:
            self._replay.started(self.model)  # fit read where to start already; nothing else may see it
        if epoch != self._epoch:
            self._epoch, self._batch, self._batch_offset = epoch, 0, 0
            self._epoch_start_steps = self._steps_completed

    def on_train_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        before = self._steps_completed
        self._batch = self._batch_offset + batch + 1
        self._steps_completed = self._epoch_start_steps + self._batch
        steps, schedule = self._steps_completed, self._schedule
        if schedule.report_due(before, steps):
            self._report_training(self._running_metrics(logs))
        if schedule.checkpoint_due(before, steps) and not self._at_epoch_end():
            self._save()
        if schedule.preempt_check_due(before, steps):
            self._core.train.report_batches(steps)
            if self._core.preempt.should_preempt():
                self._preempted = True
                self.model.stop_training = True
                if not self._at_epoch_end():
                    # Checkpoint at this batch and leave fit without validating the partial epoch.
                    if self._last_checkpoint_steps != steps:
                        self._save()
                    self._started_tap.skip_evaluation()
                logger.info("pausing after %d batches", steps)

    def _at_epoch_end(self) -> bool:
        return self._steps_per_epoch is not None and self._batch >= self._steps_per_epoch

    def on_test_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        _heartbeat.beat()  # a long validation is progress, not a hang

    def on_test_begin(self, logs: Optional[dict[str, Any]] = None) -> None:
        if self._owns_metrics:
            self._metrics.on_test_begin(logs)

    def on_test_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        if self._owns_metrics:
            self._metrics.on_test_end(logs)

    def on_epoch_end(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
        if self._owns_metrics:
            self._metrics.on_epoch_end(epoch, logs)  # first: the logs become those of every process's data
        self._started_tap.end_epoch()  # a resumed epoch is over: the next epochs read the iterators fit makes
        if self._preempted and not self._at_epoch_end():
            return  # checkpointed at the batch of the pause; this epoch is not over
        logs = dict(logs or {})
        training = {key: value for key, value in logs.items() if not key.startswith("val_")}
        if self._last_training_report != self._steps_completed:
            self._report_training(training)
        validation = {key[len("val_") :]: value for key, value in logs.items() if key.startswith("val_")}
        if validation:
            self._report_validation(validation)
        self._epoch, self._batch, self._batch_offset = epoch + 1, 0, 0
        self._epoch_start_steps = self._steps_completed
        # fit() starts reading the next epoch after the callbacks' on_epoch_end.
        self._epoch_random_state = python_and_numpy_state()
        if self._schedule.checkpoint_after_epoch(epoch) or self._preempted:
            self._save()

    def on_train_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        if self._owns_metrics:
            self._metrics.on_train_end(logs)
        self._started_tap.undo()
        if self._replay is not None:
            self._replay.started(self.model)
        if self._last_checkpoint_steps != self._steps_completed:
            self._save()
        self._core.train.report_batches(self._steps_completed, force=True)
        self._resume_status = None

    # ----- reports -----

    def _running_metrics(self, logs: Optional[dict[str, Any]]) -> dict[str, Any]:
        """The epoch's running training metrics over every process's batches so far (a collective).

        Read from the model's metrics, as Keras reads them at the epoch's end, and
        combined across the processes by the core's metric policy; every process calls
        this at the same batch.
        """
        return global_metrics(self.model, self._core.distributed, logs)

    def _report_training(self, logs: Optional[dict[str, Any]]) -> None:
        metrics = numbers_of(logs)
        self._last_training_report = self._steps_completed
        if metrics:
            self._core.train.report_training_metrics(self._steps_completed, metrics)

    def _report_validation(self, logs: dict[str, Any]) -> None:
        metrics = numbers_of(logs)
        if not metrics:
            return
        metrics = with_searcher_metric(metrics, self._core.config.searcher.metric)
        metrics["epochs"] = self._epoch + 1
        metrics["batches"] = self._steps_completed
        self._core.train.report_validation_metrics(self._steps_completed, metrics)

    # ----- checkpoints -----

    def _save(self) -> None:
        """Writes a checkpoint of the model, the optimizer and the position; every process calls it."""
        position = Position(
            self._steps_completed,
            self._epoch,
            self._batch,
            continue_id=self._continue_id,
            steps_per_epoch=self._steps_per_epoch,
            epochs=self._epochs,
        )
        if self._at_epoch_end():
            position.epoch, position.batch = self._epoch + 1, 0
        # Each process's own: Python's and NumPy's states at the epoch's start, and the
        # generators' now (the weights hold the chief's, and a process that trained on
        # batches of other sizes, an epoch's last, has drawn another amount from its own).
        own = {
            **(self._epoch_random_state or {}),
            "generators": _random_states.generator_states(_random_states.all_generators(self.model)),
        }
        storage_id = self._started_writer.write(position.metadata(), own)
        self.last_checkpoint = storage_id
        self._last_checkpoint_steps = self._steps_completed
        logger.info("checkpoint %s after %d batches", storage_id, self._steps_completed)


def _overrides(engine: Engine, name: str) -> bool:
    """Whether the engine's class (a script's subclass of DeterminedCallback) overrides method ``name``."""
    return getattr(type(engine), name) is not getattr(Engine, name)


# Batches per epoch of a trial's fit: it runs one endless epoch, cut into workloads by the engine.
FOREVER = sys.maxsize


class TrialEngine(tf.keras.callbacks.Callback):
    """A trial's driver inside ``model.fit``: workloads, validations, checkpoints, pauses between any two batches.

    The trial's ``fit`` runs one epoch of :data:`FOREVER` batches with this engine as its
    only callback. Before each step the engine asks the schedule how many batches the
    step trains (a workload's or an epoch of ``records_per_epoch``'s end cuts an
    execution short); the step trains them through the tap, which on several Horovod
    processes also agrees on pausing and stopping (the workers of a ``tf.distribute``
    strategy agree after the step, through the core's exchange); after it the engine counts them, calls the
    trial's callbacks with its own batch numbers (Keras' are meaningless here) and hands
    the schedule the step, which says whether training goes on. Keras stops after the
    step the processes agreed on: the engine writes the agreed ``model.stop_training``
    last, and carries a callback's own request into the next step's agreement. Keras'
    own epoch end, when ``fit`` stops, is no epoch of the trial's: the engine ignores it.

    Args:
        trial: the trial's controller: its bookkeeping, and what follows a workload.
        schedule: the trial's workloads.
        tap: the model's train function.
        callbacks: the trial's callbacks.
        core_context: the trial's core context.
        first_iterator: what to do with the first iterator ``fit`` makes (restore a saved position), or None.
    """

    def __init__(
        self,
        trial: TrialSteps,
        schedule: WorkloadSchedule,
        tap: Tap,
        callbacks: TrialCallbacks,
        core_context: core.Context,
        first_iterator: Optional[Callable[[Any], None]] = None,
    ) -> None:
        super().__init__()
        self._trial = trial
        self._schedule = schedule
        self._tap = tap
        self._callbacks = callbacks
        self._core = core_context
        self._first_iterator = first_iterator
        self._fit_iterator: Any = None  # the iterator fit reads, from its first step on
        self._batches = 0  # of the step under way
        self._agreed = (False, False)
        self._stop_asked = False  # a callback's request on this process, for the next step's agreement
        # The logs are the train function's tensors: the trial's callbacks read them if they need to.
        self._supports_tf_logs = True

    @property
    def fit_iterator(self) -> Any:
        """The iterator ``fit`` reads (its state is the position of a tf.data input)."""
        if self._fit_iterator is None:
            raise RuntimeError("The trial's model.fit has not trained a step yet: there is no iterator to save.")
        return self._fit_iterator

    def on_train_begin(self, logs: Optional[dict[str, Any]] = None) -> None:
        self._tap.drive(self._step)
        self._trial.begin_training()

    def on_train_batch_begin(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        self._batches = self._schedule.batches_for_step(self._tap.batches_per_call)
        self._callbacks.on_train_batch_begin(self._trial.batches)

    def _step(self, iterator: Any) -> Any:
        if self._fit_iterator is None and self._first_iterator is not None:
            self._first_iterator(iterator)
        self._fit_iterator = iterator
        logs, pause, stop = self._tap(iterator, self._batches, self._core.preempt.requested_locally(), self._stop_asked)
        self._agreed = (pause, stop)
        return logs

    def on_train_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        model, trial = self.model, self._trial
        trial.count_batches(self._batches)
        self._callbacks.on_train_batch_end(trial.batches, self._batches, logs)
        self._core.train.report_batches(trial.batches)
        pause, stop = self._agreed
        if self._core.distributed.size == 1:  # no agreement to wait for: what the callbacks just did counts
            pause, stop = self._core.preempt.requested_locally(), bool(model.stop_training)
        elif not self._tap.agrees:
            # The workers of a tf.distribute strategy agree as a script's DeterminedCallback
            # does there: through the core's own exchange, here after every step.
            flags = self._core.distributed.allgather(
                (self._core.preempt.requested_locally(), bool(model.stop_training))
            )
            pause, stop = any(asked for asked, _ in flags), any(stopped for _, stopped in flags)
        going = self._schedule.after_step(self._batches, pause, stop)
        # Last: Keras stops where every process agreed to; a request of this process's waits for the next step.
        self._stop_asked = bool(model.stop_training) and going
        if bool(model.stop_training) == going:  # set only to change it: setting a model's attribute takes time
            model.stop_training = not going

    def on_train_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        self._tap.undo()
        self._trial.end_training()

"""KerasContext: what ``det.keras.init()`` returns; ``fit``, ``evaluate`` and ``predict`` around Keras' own."""

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

from det_estimator import _horovod, _info, core
from det_estimator.config import Length, LengthUnit
from det_estimator.errors import DetEstimatorError
from det_estimator.keras._api import _fit
from det_estimator.keras._determined_callback import DeterminedCallback
from det_estimator.keras._engine import _inference, _keras_compat, _sharding
from det_estimator.keras._engine._metrics import GlobalMetrics, with_searcher_metric
from det_estimator.keras._engine._sharding import ShardedSequence, Sharder, in_input_order
from det_estimator.lifecycle import RunError, RunLifecycle, write_process_error

logger = logging.getLogger("det_estimator.keras")


@dataclass(frozen=True)
class Optimizations:
    """The config's ``optimizations`` that ``wrap_optimizer`` applies."""

    aggregation_frequency: int = 1
    average_aggregated_gradients: bool = True
    gradient_compression: bool = False


@dataclass(frozen=True)
class TrainingContext:
    """``context.training``: the trial this process trains.

    Attributes:
        hparams: the trial's hyperparameters (those of the config's ``hyperparameters``).
        trial_id: its id in the experiment store.
        experiment_id: its experiment's id.
        seed: the seed Python, NumPy and TensorFlow were seeded with.
        core: the Core API context (``det.core.init()``) it reports through.
        launched: whether an experiment launched the process (False for ``python train.py``).
        latest_checkpoint: the checkpoint a launched trial resumes from, if any.
        test_mode: one batch, one validation batch and one checkpoint (``--test``).
        searcher_metric: the config's ``searcher.metric``.
    """

    hparams: dict[str, Any]
    trial_id: int
    experiment_id: int
    seed: int
    core: Any = field(repr=False)
    launched: bool = False
    latest_checkpoint: Optional[str] = None
    test_mode: bool = False
    searcher_metric: str = "loss"


class DistributedInfo:
    """``context.distributed``: the core :class:`~det_estimator.core.DistributedContext`, plus ``shard_batch_size``.

    Every attribute of the core context (``rank``, ``size``, ``allgather``, ...) is there.
    """

    def __init__(self, distributed: core.DistributedContext) -> None:
        self._distributed = distributed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._distributed, name)

    @property
    def core(self) -> core.DistributedContext:
        """The core distributed context itself."""
        return self._distributed

    def shard_batch_size(self, global_batch_size: int) -> int:
        """This process's batch size, so that the processes together train ``global_batch_size`` records a step.

        Args:
            global_batch_size: the records of one step over all processes.

        Returns:
            ``global_batch_size // size``.

        Raises:
            TypeError: ``global_batch_size`` is not an int.
            ValueError: it is below 1, or not divisible by the number of processes.
        """
        if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
            raise TypeError(
                f"Argument `global_batch_size` must be an int. Received: global_batch_size={global_batch_size!r}"
            )
        size = self._distributed.size
        if global_batch_size < 1 or global_batch_size % size:
            raise ValueError(
                f"Argument `global_batch_size` must be a positive multiple of the number of processes ({size}), so "
                f"that each trains the same share. Received: global_batch_size={global_batch_size}"
                + (f" (use {max(size, global_batch_size // size * size)})" if global_batch_size >= 1 else "")
            )
        return global_batch_size // size

    def __repr__(self) -> str:
        return repr(self._distributed)


class DataWrapper:
    """``context.data``: ``context.data.wrap(...)`` is ``context.wrap_data(...)``."""

    def __init__(self, sharder: Sharder) -> None:
        self._sharder = sharder

    def wrap(self, *data: Any) -> Any:
        """This process's share of ``data``; see :meth:`KerasContext.wrap_data`."""
        return self._sharder.wrap(*data)


class KerasContext:
    """The new Keras API's context: made by :func:`det.keras.init`, do not build it yourself.

    Attributes:
        distributed: this process's place in the job, with ``shard_batch_size``.
        data: ``context.data.wrap(...)``, the same as :meth:`wrap_data`.
        config_data: the config's ``data`` section (empty when run by hand without one).
        seed: the seed Python, NumPy and TensorFlow were seeded with.
    """

    def __init__(
        self,
        distributed: core.DistributedContext,
        training: Optional[TrainingContext],
        config_data: dict[str, Any],
        seed: int,
        optimizations: Optimizations,
        store: core.CoreStore,
        task: str,
        owns_store: bool = False,
    ) -> None:
        self.distributed = DistributedInfo(distributed)
        self._training = training
        self.config_data = config_data
        self.seed = seed
        self._optimizations = optimizations
        # The store client of the core context it trains through (or, in a job, its own):
        # one client per process, whose checkpoints load_checkpoint_model looks up.
        self._store = store
        self._owns_store = owns_store
        self._task = task
        self._sharder = Sharder(distributed)
        self.data = DataWrapper(self._sharder)
        self._wrapped_optimizers: list[Any] = []
        self._closed = False

    # ----- what the context knows -----

    @property
    def training(self) -> TrainingContext:
        """The trial this process trains: ``context.training.hparams`` and more.

        Raises:
            DetEstimatorError: in a job (``det-estimator job run``), which trains nothing.
        """
        if self._training is None:
            raise DetEstimatorError(
                f"context.training is not available in a {self._task} job: it trains nothing. Read the job's "
                "settings from context.config_data."
            )
        return self._training

    @property
    def launched(self) -> bool:
        """Whether det-estimator launched this process (an experiment's trial or a job)."""
        return self._training is None or self._training.launched

    # ----- wrappers -----

    def wrap_data(self, *data: Any) -> Any:
        """This process's share of the data, to pass to :meth:`fit`, :meth:`evaluate` or :meth:`predict`.

        Takes what ``model.fit`` takes, and returns it in the same form: ``x, y =
        context.wrap_data(x, y)``, ``x, y, w = context.wrap_data(x, y, w)``, ``seq =
        context.wrap_data(seq)``, ``ds = context.wrap_data(ds)``. On one process it
        returns the data as it is; on N, process ``rank`` keeps every N-th record of
        arrays (and every N-th batch of a Sequence, every N-th element of a dataset),
        starting at its rank. With ``batch_size =
        context.distributed.shard_batch_size(global_batch_size)``, each training step
        then uses the same records as ``model.fit`` on one process with the global batch
        size and ``shuffle=False``.

        Wrap a ``tf.data.Dataset`` right after creating it, before batching or
        shuffling, so that its elements are records.

        Args:
            *data: arrays ``(x, y[, sample_weights])`` (each an array, a list or a dict
                of arrays), or one ``keras.utils.Sequence``, or one ``tf.data.Dataset``.

        Returns:
            This process's share, in the form given.

        Raises:
            TypeError: data of another kind.
            ValueError: arrays of different lengths, or fewer records (or batches) than processes.
        """
        return self._sharder.wrap(*data)

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """The optimizer to compile the model with: its state is checkpointed, its gradients averaged.

        On one process, and on the workers of a ``MultiWorkerMirroredStrategy`` (the
        TensorFlow launcher, whose strategy averages the gradients), it is ``optimizer``
        itself. Under Horovod (an experiment on several slots where Horovod is installed)
        it is Horovod's ``DistributedOptimizer`` around it, configured
        by the config's ``optimizations`` (``aggregation_frequency``,
        ``average_aggregated_gradients``, ``gradient_compression``). Its variables are in
        every checkpoint ``fit`` writes, and restored on resume. Wrap each optimizer
        of a model with several.

        Args:
            optimizer: a ``tf.keras.optimizers.Optimizer`` (or a name Keras knows, like "adam").

        Returns:
            The optimizer to pass to ``model.compile()``.
        """
        if self.distributed.size == 1 or not _horovod.is_distributed():
            return optimizer
        if any(optimizer is wrapped for wrapped in self._wrapped_optimizers):
            return optimizer
        wrapped = _horovod.keras_distributed_optimizer(
            tf.keras.optimizers.get(optimizer),
            aggregation_frequency=self._optimizations.aggregation_frequency,
            average_aggregated_gradients=self._optimizations.average_aggregated_gradients,
            gradient_compression=self._optimizations.gradient_compression,
        )
        self._wrapped_optimizers.append(wrapped)
        return wrapped

    # ----- fit, evaluate, predict -----

    def fit(
        self,
        model: tf.keras.Model,
        x: Any = None,
        y: Any = None,
        *,
        x_val: Any = None,
        y_val: Any = None,
        sample_weight_val: Any = None,
        callbacks: Optional[list[tf.keras.callbacks.Callback]] = None,
        checkpoint_every_epochs: Optional[int] = 1,
        report_every_batches: Optional[int] = 100,
        check_preempt_every_batches: int = 10,
        **fit_kwargs: Any,
    ) -> Optional[tf.keras.callbacks.History]:
        """``model.fit(x, y, ...)`` with metrics, checkpoints, pause and resume: returns Keras' ``History``.

        Takes ``model.fit``'s arguments, with these differences:

        - In an experiment validation data is required (``validation_data``,
          ``validation_split``, or ``x_val`` and ``y_val``), and ``epochs`` and
          ``initial_epoch`` are ignored: the searcher's operations say how many epochs
          to train (``searcher.max_length`` in epochs; a length in batches or records
          is rounded up to whole epochs), and a resumed trial continues at the epoch
          and batch of its checkpoint. Run by hand (``python train.py``), ``epochs``
          and ``initial_epoch`` are honoured and validation is optional.
        - A :class:`~det_estimator.keras.DeterminedCallback` is added: training and
          validation metrics go to the experiment store, a checkpoint (weights,
          optimizer, position, and the model's architecture for
          :meth:`load_checkpoint_model`) is written every ``checkpoint_every_epochs``
          epochs and at the end, and a pause (``det-estimator experiment pause``,
          Ctrl-C) checkpoints and stops within ``check_preempt_every_batches`` batches.
        - On several processes every process trains the same number of batches per
          epoch (the fewest any has: the last records of a larger share are left
          out), and the metrics Keras logs (and the History holds) are those of every
          process's data together, exactly, not this process's share.

        Args:
            model: a compiled model; on several processes compiled with the optimizer
                :meth:`wrap_optimizer` returned (a model of several optimizers, held as
                its attributes as a GAN holds them, with each of them wrapped).
            x: the training inputs, as ``model.fit`` takes them (wrapped by :meth:`wrap_data`).
            y: the training targets.
            x_val: validation inputs, another way to give ``validation_data``.
            y_val: validation targets.
            sample_weight_val: validation sample weights.
            callbacks: your own callbacks; they see the metrics of all processes.
            checkpoint_every_epochs: checkpoint at the end of every this many epochs.
            report_every_batches: report training metrics every this many batches too.
            check_preempt_every_batches: look for a pause request every this many batches.
            **fit_kwargs: any other argument of ``model.fit``.

        Returns:
            The ``History`` of the training (of every ``fit`` call, when a search gave
            several operations; empty when a resumed trial had nothing left to
            train); None when the searcher gave no operation.

        Raises:
            FitError: no validation data in an experiment; on several processes, an
                optimizer that did not go through :meth:`wrap_optimizer` (Horovod), an
                input whose length is unknown without ``steps_per_epoch``, or (the
                TensorFlow launcher) data given as a ``Sequence``.
        """
        training = self.training
        if x_val is not None or y_val is not None:
            if fit_kwargs.get("validation_data") is not None:
                raise _fit.FitError("Pass validation data once: validation_data= or x_val= and y_val=, not both.")
            parts = (x_val, y_val) if sample_weight_val is None else (x_val, y_val, sample_weight_val)
            fit_kwargs["validation_data"] = parts
        if training.launched:
            _fit.require_validation(fit_kwargs.get("validation_data"), fit_kwargs.get("validation_split", 0.0))
        x, y, fit_kwargs = self._prepare_inputs(model, x, y, fit_kwargs)
        # This process's batches per epoch and batch size, known before the inputs become a strategy's.
        batch_size = fit_kwargs.get("batch_size") or _fit.KERAS_DEFAULT_BATCH_SIZE
        steps_per_epoch = fit_kwargs.get("steps_per_epoch") or _fit.local_steps(x, batch_size)
        if self._spans_processes(model):
            # The workers of a MultiWorkerMirroredStrategy (the TensorFlow launcher): each its own share.
            x, fit_kwargs = _fit.per_worker_inputs(model, self.distributed.core, x, y, fit_kwargs, self.seed)
            y = None
        user_callbacks = list(callbacks or [])
        options = {
            "checkpoint_every_epochs": checkpoint_every_epochs,
            "report_every_batches": report_every_batches,
            "check_preempt_every_batches": check_preempt_every_batches,
        }
        if not training.launched:
            self._record_epochs_by_hand(int(fit_kwargs.get("epochs", 1)), steps_per_epoch, batch_size)
            callbacks = self._callbacks(model, user_callbacks, checkpoint=None, options=options)
            history = model.fit(x, y, callbacks=callbacks, **fit_kwargs)
            if training.core.preempt.acknowledged:  # Ctrl-C: `experiment resume` goes on from the checkpoint
                self._end_paused_process()
            return history
        return self._fit_operations(model, x, y, user_callbacks, options, fit_kwargs, (steps_per_epoch, batch_size))

    def _record_epochs_by_hand(self, epochs: int, steps_per_epoch: Optional[int], batch_size: int) -> None:
        """Makes the recorded run's length the ``epochs`` this run by hand trains, for ``experiment resume``.

        A run by hand honours ``fit``'s ``epochs``, not the config's ``searcher.max_length``
        (one batch when there is no config). Resumed, the script runs as an experiment's
        trial, which trains the searcher's length: without this, a run paused by Ctrl-C
        would resume to a different end, or to one it has passed, and fail.
        """
        if self.distributed.rank != 0:
            return
        steps = steps_per_epoch
        training = self.training
        config = training.core.config.with_overrides(
            max_length=Length(LengthUnit.EPOCHS, epochs),
            # Only the progress display reads it: the trial trains whole epochs of its input.
            records_per_epoch=max(1, (steps or 1) * batch_size * self.distributed.size),
        )
        RunLifecycle(self._store).amend_config(training.experiment_id, config)

    def _prepare_inputs(self, model: tf.keras.Model, x: Any, y: Any, fit_kwargs: dict[str, Any]) -> tuple:
        """On several processes: a wrapped optimizer, the same weights everywhere, and equal batches per epoch."""
        distributed = self.distributed.core
        if distributed.size == 1:
            return x, y, fit_kwargs
        if _horovod.is_distributed() and not self._trains_with_wrapped_optimizer(model):
            raise _fit.FitError(
                "With several processes, compile the model with the optimizer context.wrap_optimizer() returns, so "
                "that the processes average their gradients: model.compile(optimizer=context.wrap_optimizer(opt), ...)."
            )
        _same_weights(model, distributed)
        fit_kwargs = dict(fit_kwargs)
        split = fit_kwargs.pop("validation_split", 0.0)
        if split:
            (x, y, weights), validation = _fit.split_validation(x, y, fit_kwargs.get("sample_weight"), split)
            fit_kwargs["sample_weight"] = weights
            fit_kwargs["validation_data"] = validation
        if fit_kwargs.get("steps_per_epoch") is None:
            x, y, weights, steps = _fit.equal_steps(
                distributed, x, y, fit_kwargs.get("sample_weight"), fit_kwargs.get("batch_size")
            )
            fit_kwargs["sample_weight"] = weights
            if steps is not None:
                fit_kwargs["steps_per_epoch"] = steps
        return x, y, fit_kwargs

    def _spans_processes(self, model: tf.keras.Model) -> bool:
        """Whether the processes are the workers of the model's strategy (the TensorFlow launcher's)."""
        return self.distributed.size > 1 and _keras_compat.strategy_spans_processes(model)

    def _trains_with_wrapped_optimizer(self, model: tf.keras.Model) -> bool:
        """Whether the model's optimizer, or one it holds as an attribute, went through :meth:`wrap_optimizer`.

        A model of several optimizers (a GAN's ``compile(d_optimizer, g_optimizer)``) keeps
        them as attributes, and its ``model.optimizer`` may be one ``compile`` made by default.
        """
        candidates = [model.optimizer, *vars(model).values()]
        return any(candidate is wrapped for candidate in candidates for wrapped in self._wrapped_optimizers)

    def _callbacks(
        self,
        model: tf.keras.Model,
        user_callbacks: list[tf.keras.callbacks.Callback],
        checkpoint: Optional[str],
        options: dict[str, Any],
    ) -> list[tf.keras.callbacks.Callback]:
        """The global metrics first (every later callback sees them), the user's, then DeterminedCallback."""
        training = self.training
        self._reporter = _FitCallback(training.core, checkpoint=checkpoint, continue_id=training.trial_id, **options)
        metrics = GlobalMetrics(self.distributed.core)
        self._reporter.share_metrics(metrics)
        return [metrics, *user_callbacks, self._reporter]

    def _fit_operations(
        self,
        model: tf.keras.Model,
        x: Any,
        y: Any,
        user_callbacks: list[tf.keras.callbacks.Callback],
        options: dict[str, Any],
        fit_kwargs: dict[str, Any],
        batches: tuple[Optional[int], int],
    ) -> Optional[tf.keras.callbacks.History]:
        """One ``model.fit`` per searcher operation, each continuing from the last checkpoint.

        ``batches``: this process's batches per epoch (when known) and batch size.
        """
        training = self.training
        core_context = training.core
        for ignored in ("epochs", "initial_epoch"):
            if ignored in fit_kwargs:
                logger.info("context.fit(%s=...) is ignored in an experiment: the searcher sets it", ignored)
                fit_kwargs.pop(ignored)
        if training.test_mode:
            fit_kwargs.update(steps_per_epoch=1, validation_steps=1)
        lengths = _fit.Lengths(
            core_context.searcher.get_configured_units() or core.Unit.EPOCHS,
            fit_kwargs.get("steps_per_epoch") or batches[0],
            training.hparams.get("global_batch_size") or batches[1] * self.distributed.size,
        )
        checkpoint = training.latest_checkpoint
        histories = []
        epochs_done = 0
        for op in core_context.searcher.operations():
            epochs = 1 if training.test_mode else lengths.epochs(op.length)
            callbacks = self._callbacks(model, user_callbacks, checkpoint, options)
            history = model.fit(x, y, epochs=max(epochs, epochs_done), callbacks=callbacks, **fit_kwargs)
            histories.append(history)
            epochs_done = max(epochs_done, epochs)
            checkpoint = self._reporter.last_checkpoint or checkpoint
            if core_context.preempt.acknowledged:
                self._end_paused_process()
            if self.distributed.rank == 0:
                op.report_completed(self._searcher_metric(histories, checkpoint))
        return _fit.merge_histories(histories)

    def _end_paused_process(self) -> None:
        """Ends a paused trial's process here, after its checkpoint; ``experiment resume`` runs the script again.

        What follows ``fit`` in a script is written for a finished training (reading the
        last ``val_loss`` of the History, saving or uploading the final model). After a
        pause the History may hold no validation yet and the model is half trained, so
        that code must not run: raised there, it would turn the pause into a failure.
        """
        logger.info("paused: the process ends after its checkpoint; `experiment resume` runs the script again")
        self._end(None)
        raise SystemExit(0)

    def _searcher_metric(self, histories: list[tf.keras.callbacks.History], checkpoint: Optional[str]) -> Any:
        """The searcher metric of the latest validation: this run's, else the one in the checkpoint resumed from.

        A trial paused after its last epoch's checkpoint trains nothing when resumed;
        its checkpoint's metadata holds that epoch's validation.
        """
        training = self.training
        try:
            return _fit.searcher_metric_value(_fit.merge_histories(list(histories)), training.searcher_metric)
        except _fit.FitError:
            if checkpoint is None:
                raise
            saved = training.core.checkpoint.get_metadata(checkpoint).get("validation_metrics") or {}
            for name in (training.searcher_metric, training.searcher_metric.removeprefix("val_")):
                if name in saved:
                    return saved[name]
            raise

    def evaluate(self, model: tf.keras.Model, x: Any = None, y: Any = None, **evaluate_kwargs: Any) -> Any:
        """``model.evaluate(x, y, ...)`` over every process's data; reports the metrics in an experiment.

        On several processes each evaluates its share (wrapped by :meth:`wrap_data`),
        and the result is that of all the data together, exactly (the metrics' states
        are summed). In a launched trial the metrics are recorded as a validation
        after the batches the model has trained (``model.optimizer.iterations``),
        named as :meth:`fit` names its validations (``loss``, and ``val_loss`` too when
        that is the experiment's ``searcher.metric``).

        Args:
            model: a compiled model.
            x: the inputs, as ``model.evaluate`` takes them.
            y: the targets.
            **evaluate_kwargs: any other argument of ``model.evaluate``
                (``return_dict=True`` for a dict).

        Returns:
            What ``model.evaluate`` returns: the loss, a list of the loss and metrics, or a dict.
        """
        return_dict = evaluate_kwargs.pop("return_dict", False)
        callbacks = [GlobalMetrics(self.distributed.core), *(evaluate_kwargs.pop("callbacks", None) or [])]
        if self._spans_processes(model):
            # Each worker of the strategy evaluates its own share, until the longest share ends.
            batch_size = evaluate_kwargs.pop("batch_size", None) or _fit.KERAS_DEFAULT_BATCH_SIZE
            parts = (x, y, evaluate_kwargs.pop("sample_weight", None))
            x, steps = _fit.per_worker_validation(
                model, self.distributed.core, parts, batch_size, evaluate_kwargs.get("steps")
            )
            y = None
            if steps is not None:
                evaluate_kwargs["steps"] = steps
        local = model.evaluate(x, y, callbacks=callbacks, return_dict=True, **evaluate_kwargs)
        metrics = dict(callbacks[0].validation or local) if self.distributed.size > 1 else local
        if self._training is not None and self._training.launched:
            steps = int(model.optimizer.iterations.numpy()) if getattr(model, "optimizer", None) is not None else 0
            numbers = {name: float(value) for name, value in metrics.items() if _is_number(value)}
            # Reported as a fit's validations are, so that a searcher.metric of val_loss finds its value.
            numbers = with_searcher_metric(numbers, self._training.searcher_metric)
            self._training.core.train.report_validation_metrics(steps, numbers)
        if return_dict:
            return metrics
        values = [metrics[name] for name in metrics]
        return values[0] if len(values) == 1 else values

    def predict(self, model: tf.keras.Model, x: Any, **predict_kwargs: Any) -> Any:
        """``model.predict(x, ...)``; on several processes, every process's predictions in the input's order.

        When ``x`` is a share :meth:`wrap_data` returned (or a dataset built from one),
        every process gets the predictions of the whole input, in its order (a
        collective: every process must call it). Data that was not wrapped is
        predicted as it is, on each process.

        Args:
            model: the model.
            x: the input, as ``model.predict`` takes it.
            **predict_kwargs: any other argument of ``model.predict``.

        Returns:
            The predictions, as ``model.predict`` returns them.
        """
        if self._spans_processes(model):
            # Keras would shard the share once more and gather every worker's: each predicts its own.
            predictions = _sharding.predict_locally(model, x, predict_kwargs.get("batch_size"))
        else:
            predictions = model.predict(x, **predict_kwargs)
        share = self._sharder.share_of(x)
        if self.distributed.size == 1 or share is None:
            return predictions
        sizes = [x.batch_sizes[index] for index in range(len(x))] if isinstance(x, ShardedSequence) else None
        return in_input_order(predictions, share, self.distributed.core, sizes)

    def load_checkpoint_model(
        self,
        trial_id: Optional[int] = None,
        checkpoint_uuid: Optional[str] = None,
        *,
        model: Optional[tf.keras.Model] = None,
        custom_objects: Optional[dict[str, Any]] = None,
        best: bool = False,
    ) -> tf.keras.Model:
        """A Keras model (architecture and weights) from a checkpoint that :meth:`fit` wrote.

        Args:
            trial_id: load the last checkpoint of this trial (the one of the most
                batches), or its best by its experiment's ``searcher.metric`` with ``best=True``.
            checkpoint_uuid: load this checkpoint.
            model: a model built as in training, to load the weights into (for
                subclassed models, whose architecture checkpoints cannot hold).
            custom_objects: your own layers and functions the architecture names.
            best: with ``trial_id``, the best checkpoint rather than the last.

        Returns:
            The model, not compiled.

        Raises:
            ValueError: neither or both of ``trial_id`` and ``checkpoint_uuid``, or the trial has no checkpoint.
            UnknownIdError: no such trial or checkpoint in the store.
        """
        if (trial_id is None) == (checkpoint_uuid is None):
            raise ValueError(
                "Pass one of trial_id= and checkpoint_uuid= to load_checkpoint_model(). "
                f"Received: trial_id={trial_id!r}, checkpoint_uuid={checkpoint_uuid!r}"
            )
        if checkpoint_uuid is not None:
            path = Path(self._store.checkpoint(checkpoint_uuid).path)
        elif trial_id is not None:  # one of them is given, as checked above
            path = _trial_checkpoint(self._store, int(trial_id), best)
        return _inference.load_model(path, model=model, custom_objects=custom_objects)

    # ----- end -----

    def close(self) -> None:
        """Ends the run: records how it ended and closes the connections to the other processes.

        Called when the script exits; call it yourself (or use ``with det.keras.init()
        as context:``) to end earlier.
        """
        self._end(None)

    def _end(self, error: Optional[BaseException]) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._training is not None:
                self._training.core.close(type(error) if error else None, error, None)
            else:
                self._record_job_error(error)
                self.distributed.core.close()
        finally:
            if self._owns_store:
                self._store.close()

    def _record_job_error(self, error: Optional[BaseException]) -> None:
        """A job's process records the root cause of its failure, with the user's own frames, for ``job run``."""
        directory = _info.run_directory()
        recorded = None if error is None else RunError.of(error, self.distributed.rank)
        if recorded is not None and directory is not None:
            with contextlib.suppress(OSError):  # the launcher is gone with its folder: nobody to tell
                write_process_error(directory, recorded)

    def __enter__(self) -> "KerasContext":
        return self

    def __exit__(self, exc_type: Any, exc_val: Optional[BaseException], exc_tb: Any) -> None:
        self._end(exc_val)


class _FitCallback(DeterminedCallback):
    """The DeterminedCallback ``context.fit`` adds: its checkpoints name ``context.fit`` as their writer."""

    _written_by = "context.fit"


def _trial_checkpoint(store: core.CoreStore, trial_id: int, best: bool) -> Path:
    trial = store.trial(trial_id)
    experiment = store.experiment(trial.experiment_id)
    checkpoints = store.checkpoints(trial.experiment_id, trial_id=trial_id)
    if not checkpoints:
        raise ValueError(f"Trial {trial_id} has no checkpoint to load.")
    chosen = checkpoints[-1]
    if best:
        metric = experiment.searcher_metric
        sign = 1.0 if experiment.smaller_is_better else -1.0
        scored = []
        for index, record in enumerate(checkpoints):
            value = _metric_of(record.validation_metrics, metric)
            if value is not None:
                scored.append((sign * value, -record.batches, index))
        if scored:
            chosen = checkpoints[min(scored)[2]]
    return Path(chosen.path)


def _metric_of(metrics: Optional[dict[str, Any]], name: str) -> Optional[float]:
    value = (metrics or {}).get(name)
    if value is None and name.startswith("val_"):
        value = (metrics or {}).get(name[4:])
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same_weights(model: tf.keras.Model, distributed: core.DistributedContext) -> None:
    """Gives every process the chief's weights when they differ (a collective).

    ``init()`` seeds every process alike, so a model built the same way starts with the
    same weights and this only compares digests; a model built otherwise gets the chief's.
    """
    if not model.built:
        return
    import hashlib

    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(weight.tobytes())
    digests = distributed.allgather(digest.hexdigest())
    if len(set(digests)) > 1:
        logger.info("the processes built different initial weights: every process takes the chief's")
        model.set_weights(distributed.broadcast(model.get_weights() if distributed.rank == 0 else None))

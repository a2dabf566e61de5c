"""DeterminedCallback: metrics, checkpoints, pause and resume for a script's own ``model.fit``, on the Core API."""

from typing import Optional, Union

from det_estimator import core
from det_estimator.keras._engine._loop import Engine
from det_estimator.keras._engine._schedule import EpochSchedule


class DeterminedCallback(Engine):
    """Reports metrics and progress, checkpoints, pauses and resumes a script's own ``model.fit``.

    Pass it to ``model.fit(..., callbacks=[...])`` of a model already compiled (under a
    ``tf.distribute`` strategy's scope, or with Horovod's ``DistributedOptimizer``, or
    on one process). Every process of the job must use it, with the same arguments.

    - **Metrics**: training metrics (Keras' running values of the epoch) every
      ``report_every_batches`` batches and at each epoch's end; validation metrics at
      the end of each epoch in which Keras validated, under Keras' names without the
      ``val_`` prefix (``loss``, not ``val_loss``; when the experiment's
      ``searcher.metric`` is a ``val_`` name, that name is reported too). Steps are
      counted in batches trained since the start of training. On several processes
      every value is that of all the processes' data together: each Keras metric's
      state is summed over the processes before it is read (``AUC``, ``Precision``
      and a loss over uneven shares are exact), a ``ReducerMetric`` exchanges its
      state itself, and under a ``MultiWorkerMirroredStrategy`` Keras' values already
      are global. Callbacks after this one in the list, and the History, see the same
      values.
    - **Progress**: batches trained, of ``epochs * steps_per_epoch``.
    - **Checkpoints**: through ``core_context.checkpoint``, every
      ``checkpoint_every_epochs`` epochs, every ``checkpoint_every_batches`` batches if
      set, when pausing, and at the end of training, in the Keras checkpoint format a
      ``TFKerasTrial``'s checkpoints have too: the model's weights, the optimizer's
      state and the random generators' (``model_checkpoint``, what
      ``model.save_weights`` writes, so that ``model.load_weights(<checkpoint
      directory>/model_checkpoint)`` loads the trained model under Keras 2, as the
      reference system documents), the model's architecture when it has one, and the
      position (epoch, batch within the epoch, batches in all) with the
      ``continue_id`` in the checkpoint's metadata. The chief writes them; every
      process takes part, as ``tf.distribute`` requires. Override :meth:`save_model`
      and :meth:`load_model` (both, with the reference's arguments) to write and read
      the model otherwise.
    - **Pause**: every ``check_preempt_every_batches`` batches all processes ask
      ``core_context.preempt.should_preempt()`` together (one answer for all); when it
      says so the callback checkpoints and stops training at that batch, skipping the
      validation of the interrupted epoch.
    - **Resume**: in ``on_train_begin``, given ``checkpoint``, every process loads its
      weights. If the checkpoint's ``continue_id`` equals ``continue_id``, it also loads
      the optimizer's state and continues at the exact epoch and batch where the
      checkpoint was taken (the batches already trained in that epoch are read from the
      input and skipped). Otherwise training starts at ``initial_epoch`` from the
      checkpoint's weights (a warm start).

    Exact resumption assumes an input that Keras reads afresh each epoch in the same
    order (arrays with ``shuffle=False``, a ``Sequence``, or a finite
    ``tf.data.Dataset``); a repeating dataset with ``steps_per_epoch`` starts again from
    its own beginning. A finite dataset shuffled anew each epoch (``shuffle(n, seed=...)``)
    is read in the resumed epoch's order too on one process and under Horovod: the
    callback makes that epoch's iterator as an uninterrupted ``fit`` would have; under a
    ``tf.distribute`` strategy of several workers (a distributed dataset) the resumed
    run's epochs are shuffled afresh. A ``Sequence`` may be shuffled by ``fit`` (its default
    ``shuffle=True``): Keras draws each epoch's order from Python's ``random``, whose
    state (and NumPy's) at the start of the epoch every checkpoint holds per process, so
    the resumed epoch is read in the same order. A ``Sequence`` that reorders its own
    items in its ``on_epoch_end`` starts again from its initial order. Keras' running
    averages of the training metrics restart at the batch of a resume. Do not combine
    it with Keras' ``BackupAndRestore`` (they drive the same mechanism of ``fit``) or
    ``ModelCheckpoint`` (redundant).

    Args:
        core_context: the context of ``det.core.init()``.
        checkpoint: the uuid of a checkpoint to start from, or None. In an experiment,
            ``det.get_cluster_info().latest_checkpoint``.
        continue_id: saved with every checkpoint; when it equals the one saved in
            ``checkpoint``, training continues where that checkpoint stopped instead of
            starting over from its weights. In an experiment,
            ``det.get_cluster_info().trial.trial_id``.
        report_every_batches: report training metrics every this many batches (they are
            always reported at the end of each epoch too); None for epoch ends only.
        checkpoint_every_epochs: checkpoint at the end of every this many epochs; None
            for no epoch checkpoints (there are still the pause's and the final one).
        checkpoint_every_batches: also checkpoint every this many batches trained, for
            long epochs; None (the default) for none.
        check_preempt_every_batches: ask whether to pause every this many batches; a
            pause is obeyed within this many batches. Each check is a small collective
            among the processes.
        train_metrics_report_period: the reference system's name for
            ``report_every_batches`` (``"epoch"`` or a number of batches).
        checkpoint_epochs: the reference system's name for ``checkpoint_every_epochs``.

    Raises:
        ValueError: a period is not a positive int.

    Example:
        ::

            distributed, strategy = det.core.DistributedContext.from_tf_config()
            with det.core.init(distributed=distributed) as core_context:
                with strategy.scope():
                    model = build_model()
                    model.compile(optimizer="adam", loss="mse")
                info = det.get_cluster_info()
                callback = det.keras.DeterminedCallback(
                    core_context, checkpoint=info.latest_checkpoint, continue_id=info.trial.trial_id
                )
                model.fit(x, y, epochs=10, validation_data=(vx, vy), callbacks=[callback])
    """

    # What its checkpoints' metadata names as their writer.
    _written_by = "DeterminedCallback"

    def __init__(
        self,
        core_context: core.Context,
        checkpoint: Optional[str] = None,
        continue_id: Union[int, str, None] = None,
        *,
        report_every_batches: Optional[int] = 100,
        checkpoint_every_epochs: Optional[int] = 1,
        checkpoint_every_batches: Optional[int] = None,
        check_preempt_every_batches: int = 10,
        train_metrics_report_period: Union[int, str, None] = None,
        checkpoint_epochs: Optional[int] = None,
    ) -> None:
        schedule = EpochSchedule.from_arguments(
            report_every_batches,
            checkpoint_every_epochs,
            checkpoint_every_batches,
            check_preempt_every_batches,
            train_metrics_report_period,
            checkpoint_epochs,
        )
        super().__init__(core_context, schedule, checkpoint, continue_id)

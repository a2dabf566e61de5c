"""core.init() and core.Context: the one context every trial type and training script reports through."""

import contextlib
import logging
import os
import sys
import threading
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional, Union

from det_estimator import _info, _root_cause
from det_estimator._heartbeat import HeartbeatWriter
from det_estimator.checkpoint import check_checkpoint_storage
from det_estimator.config import ExperimentConfig, Length, LengthUnit, load_experiment_config
from det_estimator.config._errors import describe
from det_estimator.core._checkpoint import CheckpointContext, RetentionPolicy
from det_estimator.core._distributed import DistributedContext, DummyDistributedContext
from det_estimator.core._preempt import PauseWatcher, PreemptContext, PreemptMode
from det_estimator.core._searcher import FixedLengths, SearcherContext, StoreOperations, Unit
from det_estimator.core._store import CoreStore
from det_estimator.core._train import EarlyExitReason, TrainContext
from det_estimator.errors import DetEstimatorError, InvalidHP
from det_estimator.lifecycle import Ending, RunError, RunLifecycle
from det_estimator.store import ExperimentStore, StoreRecorder, launcher_alive

logger = logging.getLogger("det_estimator.core")

_UNITS = {LengthUnit.BATCHES: Unit.BATCHES, LengthUnit.RECORDS: Unit.RECORDS, LengthUnit.EPOCHS: Unit.EPOCHS}


class Context:
    """The Core API: ``distributed``, ``train``, ``checkpoint``, ``preempt`` and ``searcher``, with ``info``.

    Made by :func:`init`; use it as a context manager, and do all the training inside
    the ``with`` block::

        with det.core.init() as core_context:
            ...

    Attributes:
        distributed: this process's place in the job (:class:`DistributedContext`).
        train: metrics and progress (:class:`TrainContext`).
        checkpoint: checkpoints (:class:`CheckpointContext`).
        preempt: pause requests (:class:`PreemptContext`).
        searcher: how long to train (:class:`SearcherContext`).
        info: the :class:`~det_estimator.ClusterInfo` of the trial.
        config: the trial's experiment config, parsed once when the context was built
            (an :class:`~det_estimator.config.ExperimentConfig`).
    """

    def __init__(
        self,
        distributed: DistributedContext,
        train: TrainContext,
        checkpoint: CheckpointContext,
        preempt: PreemptContext,
        searcher: SearcherContext,
        info: _info.ClusterInfo,
        config: ExperimentConfig,
        watcher: PauseWatcher,
        store: CoreStore,
        owns_store: bool = False,
        recorder: Optional[StoreRecorder] = None,
        owned_run: Optional[int] = None,
        by_hand: bool = False,
    ) -> None:
        self.distributed = distributed
        self.train = train
        self.checkpoint = checkpoint
        self.preempt = preempt
        self.searcher = searcher
        self.info = info
        self.config = config
        self._watcher = watcher
        self._store = store
        self._owns_store = owns_store
        self._recorder = recorder
        self._owned_run = owned_run
        # A run by hand has no launched info to read: every process is told of it here.
        self._by_hand = by_hand
        self._exits = contextlib.ExitStack()

    @property
    def store(self) -> CoreStore:
        """The one experiment store client this context, and what is built on it, records through.

        A front end built on the Core API (``det.keras.init()``'s context) asks it for what
        the store holds rather than opening a client of its own. Valid until the context
        closes.
        """
        return self._store

    def start(self) -> "Context":
        """Starts watching for pause requests; SIGTERM and SIGINT ask for a pause while it runs.

        A run recorded by a script run by hand (by its chief, on several processes) is,
        while it lasts, what ``det.get_cluster_info()`` returns on every process.
        """
        self._watcher.start()
        self._exits.enter_context(self._watcher.on_signals())
        if self._by_hand:
            _info.set_in_process(self.info)
            self._exits.callback(_info.set_in_process, None)
        return self

    def close(
        self,
        exc_type: Optional[type] = None,
        exc_val: Optional[BaseException] = None,
        exc_tb: Optional[types.TracebackType] = None,
    ) -> None:
        """Stops watching, closes the connections to the other processes, and ends a run this context owns."""
        self._exits.close()
        self._watcher.close()
        self.train.flush()
        lifecycle = RunLifecycle(self._store)
        if exc_val is not None:
            # The process that raised records its own error (the first recorded wins), so the
            # launcher shows it with its rank; InvalidHP too, which is not a failure: a search
            # replaces the trial.
            with contextlib.suppress(Exception):
                lifecycle.record_error(self.info.require_trial().run_id, RunError.of(exc_val, self.distributed.rank))
        self.distributed.close()
        if self._owned_run is not None:
            # sys.exit(0) is a clean end (after should_preempt(), say), as a launched script's is.
            state = lifecycle.end(self.info, Ending(error=exc_val))
            lifecycle.end_experiment(self.info.require_trial().experiment_id, state, self.config)
        if self._recorder is not None:
            self._recorder.close()
        if self._owns_store:
            self._store.close()

    def __enter__(self) -> "Context":
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[type],
        exc_val: Optional[BaseException],
        exc_tb: Optional[types.TracebackType],
    ) -> Optional[bool]:
        self.close(exc_type, exc_val, exc_tb)
        if isinstance(exc_val, InvalidHP):
            self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            logger.info("InvalidHP raised: the trial ends without counting as failed (%s)", exc_val)
            return True
        return None


def init(
    *,
    distributed: Optional[DistributedContext] = None,
    checkpoint_storage: Optional[Union[str, os.PathLike]] = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: Any = None,
    config: Optional[dict[str, Any]] = None,
) -> Context:
    """Builds the :class:`Context` of this process, on or off a launched experiment.

    In a process launched for an experiment (``det-estimator experiment create``, a
    resume, ``run_trial``) it is the context of that experiment's trial. In a plain
    ``python train.py`` it records a new experiment in the default store (the
    ``DET_ESTIMATOR_STORE`` variable, else ``~/.local/share/det-estimator``) with this
    process as its only one, so that the run can be listed, plotted and resumed with
    ``det-estimator experiment resume``.

    Args:
        distributed: this process's place in a job of several processes; by default it
            is read from the launch (horovodrun's or ``TF_CONFIG``'s variables), or a
            single-process context.
        checkpoint_storage: off an experiment, the directory for checkpoints (default:
            ``config``'s ``checkpoint_storage``, else ``checkpoints`` in the current
            directory); ignored in a launched experiment.
        preempt_mode: how :meth:`PreemptContext.should_preempt` is called.
        tensorboard_mode: accepted for compatibility; metrics always go to TensorBoard
            event files beside the store.
        config: off an experiment, the experiment config (a dict) to record; by
            default the run has no hyperparameters and its searcher gives one operation
            of length 1. A launched experiment has its own config, and this one is
            ignored there, so a script may pass the config it is launched with.

    Returns:
        The context; enter it with ``with``.

    Raises:
        TypeError: an argument of the wrong type (the message names it).
        ValueError: a ``preempt_mode`` that is not a :class:`PreemptMode`; off an
            experiment, an invalid ``config`` or checkpoint storage that cannot hold
            checkpoints.
        RefusedOnAnotherProcessError: off an experiment on several processes, another
            process refused its arguments or could not record the run (its rank and
            message are given); every process raises, none waits for the others.
    """
    launched = _info.get_cluster_info()
    owned_run = None
    by_hand = launched is None
    recorded_config = None
    store = None
    if launched is None:
        # A script started by hand, on one process or several (a launcher run without an
        # experiment): the chief records one experiment and tells the others about it.
        info, owned_run, distributed, recorded_config, store = _init_by_hand(
            distributed, checkpoint_storage, preempt_mode, config
        )
    else:
        info = launched
        _check_init_arguments(distributed, checkpoint_storage, preempt_mode, config)
    if distributed is None:
        distributed = DistributedContext.from_environment() if info.slots > 1 else DummyDistributedContext()
    return build_context(
        info,
        distributed,
        preempt_mode,
        owned_run=owned_run,
        strict_metric=not by_hand,
        by_hand=by_hand,
        config=recorded_config,
        store=store,
        owns_store=True,
    )


class RefusedOnAnotherProcessError(DetEstimatorError):
    """``core.init()`` of a script run by hand was refused on another process of the job.

    Every process raises: the one that refused its arguments (or could not record the
    run) its own error, the others this one, with that process's rank and message, so
    that none waits for the others forever.
    """


def _init_by_hand(
    distributed: Any, checkpoint_storage: Any, preempt_mode: Any, config: Any
) -> tuple[_info.ClusterInfo, Optional[int], DistributedContext, Optional[ExperimentConfig], Optional[CoreStore]]:
    """Records the run of a script started by hand (by its chief) and tells every process of it.

    On several processes, each checks its own arguments, and the chief the config, before
    anything is recorded; what one of them refuses, or the chief fails to record, is told
    to all, and every process raises at once, instead of waiting for the others forever.

    Returns:
        ``(info, owned_run, distributed, config, store)``: the run's info on every process,
        the run this process owns (the chief's), the distributed context (built from the
        launch when none was given), and the config the chief recorded and the store it
        recorded it in, open (both None elsewhere).
    """
    refused: Optional[BaseException] = None
    try:
        _check_init_arguments(distributed, checkpoint_storage, preempt_mode, config)
    except (TypeError, ValueError) as error:
        refused = error
    made_here = not isinstance(distributed, DistributedContext)
    if made_here:
        # Also when `distributed` was refused: the others must still hear of it.
        distributed = DistributedContext.from_environment()
    store: Optional[CoreStore] = None
    try:
        experiment_config = None
        if refused is None and distributed.rank == 0:
            try:
                experiment_config = _script_run_config(config, checkpoint_storage)
            except Exception as error:  # an invalid config or checkpoint storage, above all
                refused = error
        _raise_if_refused(distributed, refused, distributed.allgather(_refusal(refused)))
        info: Optional[_info.ClusterInfo] = None
        owned_run, failure = None, None
        if experiment_config is not None:  # the chief's, as nothing was refused
            try:
                store = ExperimentStore()
                info = RunLifecycle(store).begin_by_hand(
                    experiment_config, command=_script_command(), slots=distributed.size
                )
                owned_run = info.require_trial().run_id
            except Exception as error:  # the store cannot be used, say
                failure = error
        if distributed.size > 1:
            shared = distributed.broadcast(
                {"refused": _refusal(failure), "info": None if info is None else info.to_json()}
            )
            _raise_if_refused(distributed, failure, [shared["refused"]])
            info = _info.ClusterInfo.from_json(shared["info"])
        elif failure is not None:
            raise failure
        assert info is not None  # recorded by the chief (and told to the others), or its failure raised
    except BaseException:
        if store is not None:
            store.close()
        if made_here:
            distributed.close()
        raise
    return info, owned_run, distributed, experiment_config, store


def _refusal(error: Optional[BaseException]) -> Optional[tuple[str, str]]:
    """What the other processes are told of this process's error: its type's name and its message."""
    return None if error is None else (type(error).__name__, str(error))


def _raise_if_refused(
    distributed: DistributedContext, own: Optional[BaseException], refusals: list[Optional[tuple[str, str]]]
) -> None:
    """Raises this process's own error, else the first refusal of another process (``refusals`` in rank order).

    ``refusals`` holds one entry per process (an allgather's), or the chief's alone.
    """
    if own is not None:
        raise own
    for rank, refusal in enumerate(refusals):
        if refusal is not None:
            kind, message = refusal
            raise RefusedOnAnotherProcessError(
                f"det.core.init() failed on process {rank} of the {distributed.size} of this job, so every "
                f"process stops here: {kind}: {message}"
            )


def _check_init_arguments(distributed: Any, checkpoint_storage: Any, preempt_mode: Any, config: Any) -> None:
    """Refuses wrong arguments of :func:`init` before anything is recorded, naming the argument."""
    if distributed is not None and not isinstance(distributed, DistributedContext):
        raise TypeError(
            "det.core.init(distributed=...) takes a det.core.DistributedContext (e.g. "
            f"DistributedContext.from_horovod(hvd)) or None. Received: {describe(distributed)}"
        )
    if checkpoint_storage is not None and not isinstance(checkpoint_storage, (str, os.PathLike)):
        raise TypeError(
            "det.core.init(checkpoint_storage=...) takes the path of a directory (a str or path-like) or None. "
            f"Received: {describe(checkpoint_storage)}"
        )
    if not isinstance(preempt_mode, PreemptMode):
        try:
            PreemptMode(preempt_mode)
        except ValueError:
            modes = ", ".join(f"PreemptMode.{mode.name}" for mode in PreemptMode)
            raise ValueError(
                f"det.core.init(preempt_mode=...) takes one of: {modes}. Received: {describe(preempt_mode)}"
            ) from None
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(
            "det.core.init(config=...) takes the experiment config as a dict (e.g. yaml.safe_load of the "
            f"config file) or None. Received: {describe(config)}"
        )


def build_context(
    info: _info.ClusterInfo,
    distributed: DistributedContext,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    owned_run: Optional[int] = None,
    strict_metric: bool = True,
    by_hand: bool = False,
    config: Optional[ExperimentConfig] = None,
    store: Optional[CoreStore] = None,
    owns_store: bool = False,
) -> Context:
    """The core context of trial ``info`` for this process (det-estimator's controllers build theirs here).

    The trial's config is parsed here, once, into ``Context.config``, unless the caller
    parsed it already and passes it as ``config``. Every part of the context records
    through one store client: ``store``, which the caller opened (and closes, unless it
    hands it over with ``owns_store``); by default the context opens ``info.store_path``
    and closes it when it closes.
    """
    # A new run: the cause noted for an earlier failure in this process (a run by hand that
    # failed, in a notebook) is not this run's.
    _root_cause.forget()
    trial = info.trial
    if trial is None:
        raise DetEstimatorError(f"core.init() needs a trial; the task is a {info.task_type}.")
    if config is None:
        config = load_experiment_config(trial.config)
    if store is None:
        store, owns_store = ExperimentStore(info.store_path), True
    try:
        parts = _parts(info, distributed, preempt_mode, strict_metric, config, store)
    except BaseException:
        if owns_store:
            store.close()
        raise
    return Context(
        **parts,
        info=info,
        config=config,
        store=store,
        owns_store=owns_store,
        owned_run=owned_run,
        by_hand=by_hand,
    )


def _parts(
    info: _info.ClusterInfo,
    distributed: DistributedContext,
    preempt_mode: PreemptMode,
    strict_metric: bool,
    config: ExperimentConfig,
    store: CoreStore,
) -> dict[str, Any]:
    """The parts of a :class:`Context` (and what they share), each recording through ``store``."""
    trial = info.require_trial()
    recorder = StoreRecorder(store, trial.trial_id, trial.run_id) if distributed.rank == 0 else None
    searcher_config = config.searcher
    # A launched run's launcher watches for hangs through the directory of its pause file.
    launched = info.pause_file is not None and info.launcher is not None
    watcher = PauseWatcher(
        info.pause_file,
        _StorePauseRequest(store, trial.experiment_id) if recorder else None,
        None if info.launcher is None else _LauncherGone(*info.launcher),
        HeartbeatWriter(Path(str(info.pause_file)).parent, distributed.rank) if launched else None,
    )
    checkpoint = CheckpointContext(
        distributed,
        info.checkpoint_dir,
        recorder,
        RetentionPolicy.of(config),
        store=store,
        before_seal=watcher.exit_if_orphaned,
    )
    max_batches = (
        None
        if searcher_config.length_from_script
        else _length_in_batches(config, trial.hparams, searcher_config.max_length.value)
    )
    train = TrainContext(
        distributed,
        recorder,
        searcher_metric=searcher_config.metric if strict_metric else None,
        smaller_is_better=searcher_config.smaller_is_better,
        max_batches=lambda: max_batches,
        on_validation=checkpoint._on_validation,
        experiment=(store, trial.experiment_id),
        tensorboard_dir=None if recorder is None else store.trial(trial.trial_id).tensorboard_dir,
    )
    acknowledge = (lambda: store.acknowledge_preemption(trial.run_id)) if recorder else (lambda: None)
    preempt = PreemptContext(distributed, watcher, acknowledge, preempt_mode)

    def report_batches(batches: int) -> None:
        train.report_batches(batches)

    source = (
        StoreOperations(store, trial.trial_id)
        if info.search_driven
        else FixedLengths([searcher_config.max_length.value])
    )
    searcher = SearcherContext(
        distributed,
        source,
        _UNITS[searcher_config.max_length.unit],
        report_batches=report_batches,
        to_batches=lambda length: _length_in_batches(config, trial.hparams, length),
        report_target=train.report_target,
        length_from_script=searcher_config.length_from_script,
    )
    return {
        "distributed": distributed,
        "train": train,
        "checkpoint": checkpoint,
        "preempt": preempt,
        "searcher": searcher,
        "watcher": watcher,
        "recorder": recorder,
    }


def _length_in_batches(config: ExperimentConfig, hparams: dict[str, Any], length: float) -> Optional[int]:
    """``length`` in the unit of ``searcher.max_length``, in batches; None when it cannot be known.

    Records and epochs need the ``global_batch_size`` hyperparameter, which a script
    may not have.
    """
    unit = config.searcher.max_length.unit
    if unit == LengthUnit.BATCHES:
        return round(length)
    global_batch_size = hparams.get("global_batch_size")
    if not isinstance(global_batch_size, int) or global_batch_size < 1:
        return None
    return Length(unit, round(length)).to_batches(global_batch_size, config.records_per_epoch)


class _StorePauseRequest:
    """Whether ``experiment pause`` recorded a request; polled from the watcher's own thread.

    That thread reads through a client of its own, which the context's client gives.
    """

    def __init__(self, store: CoreStore, experiment_id: int) -> None:
        self._store = store
        self._experiment_id = experiment_id
        self._local = threading.local()

    def __call__(self) -> bool:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = self._store.for_thread()
        return store.experiment(self._experiment_id).pause_requested_at is not None


class _LauncherGone:
    """Whether the process that launched the run is gone (killed, say); polled from the watcher's thread."""

    def __init__(self, pid: int, host: str, started: Optional[int]) -> None:
        self._launcher = (pid, host, started)

    def __call__(self) -> bool:
        return not launcher_alive(*self._launcher)


def _script_command() -> Optional[list[str]]:
    """The command that ran this script, to run it again on a resume."""
    return [os.path.basename(sys.executable), *sys.argv] if sys.argv and sys.argv[0] else None


def _script_run_config(
    config: Optional[Mapping[str, Any]], checkpoint_storage: Optional[Union[str, os.PathLike]]
) -> ExperimentConfig:
    """The config a script's run by hand is recorded with, checked (its checkpoint storage too); nothing recorded.

    Raises:
        ConfigError: an invalid config.
        CheckpointStorageError: checkpoint storage that cannot hold checkpoints.
    """
    command = _script_command()
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "script"
    raw = dict(config or {})
    raw.setdefault("name", script)
    if "entrypoint" not in raw and "entrypoint_script" not in raw:
        raw["entrypoint"] = " ".join(command) if command else "python3"
    raw.setdefault("searcher", {"name": "single", "metric": "loss", "max_length": {"batches": 1}})
    if checkpoint_storage is not None:
        raw["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(Path(checkpoint_storage).resolve())}
    raw.setdefault("checkpoint_storage", {"type": "shared_fs", "host_path": str(Path("checkpoints").resolve())})
    experiment_config = load_experiment_config(raw)
    check_checkpoint_storage(Path(experiment_config.checkpoint_storage.checkpoint_directory).resolve())
    return experiment_config

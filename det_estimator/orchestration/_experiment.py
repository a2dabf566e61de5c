"""Recording an experiment, running its trial in launched processes or in this one, and following it."""

import contextlib
import dataclasses
import shlex
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Optional

from det_estimator import _info, launcher
from det_estimator._host_list import HostSlots
from det_estimator.config import ExperimentConfig, load_experiment_config
from det_estimator.errors import DetEstimatorError
from det_estimator.lifecycle import Ending, ErrorKind, RunError, RunLifecycle
from det_estimator.orchestration._display import Display
from det_estimator.orchestration._follow import StoreFollower
from det_estimator.orchestration._processes import FinishedRun, SlotPool, TrialProcess, device_type, restart_cause
from det_estimator.orchestration._restarts import Failure, resumes_from, why_not_restart
from det_estimator.orchestration._runs import checkpoint_storage_root
from det_estimator.orchestration._search import SearchRunner
from det_estimator.store import (
    LEASE_SECONDS,
    ExperimentBusyError,
    ExperimentRecord,
    ExperimentStore,
    SearchState,
    State,
    StoreUnavailableError,
    TrialRecord,
    TrialRunRecord,
)

# How often the launcher looks at the store for progress and pause requests.
_POLL_SECONDS = 0.25
# A pause still running after this long may be stuck (a process hung before it could see
# the request): another Ctrl-C or SIGTERM then ends the trials' processes at once. Sooner,
# it is an impatient repeat, and the pause goes on to its checkpoint.
_STOP_AFTER_SECONDS = 10.0


class LauncherReplacedError(ExperimentBusyError):
    """Another launcher took the experiment over while this one ran it.

    It can: a launcher whose heartbeat has not reached the store for longer than the
    lease (its host cut off from a PostgreSQL server for half a minute, say) counts as
    gone, and ``experiment resume`` on another host claims the experiment.
    """


def record_experiment(
    store: ExperimentStore,
    config: ExperimentConfig,
    context_dir: str,
    *,
    name: Optional[str] = None,
    test: bool = False,
    hosts: Optional[Sequence[HostSlots]] = None,
    slots: Optional[int] = None,
    command: Optional[list[str]] = None,
    trial_class: Optional[_info.TrialClassSpec] = None,
    run_key: Optional[str] = None,
) -> int:
    """Records a new experiment and starts its search (which records its first trials); returns its id.

    Args:
        store: the experiment store.
        config: the validated config.
        context_dir: the directory the trial runs in (absolute).
        name: the experiment's name (default: the config's).
        test: one batch, one validation step and one checkpoint.
        hosts: the machines it runs on; None for this one.
        slots: the slots its trials share on this machine (default: one trial's,
            ``resources.slots_per_trial``); with ``hosts``, theirs.
        command: the command every slot runs, for a script given outside the config
            (``det.init(local=False)``); a config whose entrypoint is a command gives its own.
        trial_class: the trial class, when it is not the config's entrypoint.
        run_key: the key under which a later run with the same key resumes it.
    """
    if config.is_script and command is None:
        command = list(config.entrypoint_command)
    if command is not None:
        entrypoint = shlex.join(command)
    elif trial_class is not None:
        entrypoint = f"{trial_class.module}:{trial_class.qualname}"
    else:
        entrypoint = config.entrypoint
    if hosts:
        slots = sum(entry.slots for entry in hosts)
    experiment_id = store.create_experiment(
        name=name or config.name or "experiment",
        config=config.to_dict(),
        context_dir=context_dir,
        entrypoint=entrypoint,
        slots=slots or config.resources.slots_per_trial,
        test=test,
        command=command,
        hosts=hosts,
        run_key=run_key,
        trial_class=None if trial_class is None else dataclasses.asdict(trial_class),
    )
    SearchRunner(store, store.experiment(experiment_id), config, checkpoint_storage_root(config, context_dir))
    return experiment_id


def find_or_record_experiment(
    store: ExperimentStore, run_key: str, config: ExperimentConfig, context_dir: str, test: bool, **kwargs
) -> int:
    """The experiment recorded under ``run_key``, updated to ``config``, or a new one.

    A run found again keeps its seed, so its trial keeps its hyperparameters; its length
    and slots come from the new config. A test run is always a new experiment, under no
    key, as ``experiment create --test`` makes one: it checks the code as it is now, so
    it must not restore an earlier run's checkpoint (of a model since changed, perhaps),
    nor leave its one batch for a later run to resume from.
    """
    if test:
        return record_experiment(store, config, context_dir, test=True, **kwargs)
    existing = store.find_experiment(run_key)
    if existing is None:
        return record_experiment(store, config, context_dir, test=test, run_key=run_key, **kwargs)
    config = config.with_overrides(seed=existing.config["reproducibility"]["experiment_seed"])
    store.update_experiment(existing.id, config.to_dict(), config.resources.slots_per_trial, test)
    return existing.id


def run_experiment(
    store: ExperimentStore,
    experiment_id: int,
    display: Display,
    verbose: bool = False,
    config: Optional[ExperimentConfig] = None,
) -> State:
    """Runs an experiment's search to its end or to a pause; returns the experiment's state.

    Trials run in launched processes, as many at once as the experiment's slots allow
    (each takes ``resources.slots_per_trial``) and the search wants. Progress is read
    from the store and shown on ``display``; everything the processes print goes to the
    trials' logs (and to ``display`` with ``verbose``). SIGINT and SIGTERM to this
    process, and ``experiment pause`` from anywhere, make every running trial checkpoint
    and stop; the search is saved after every step, so a resume continues it exactly.

    ``config`` is the experiment's config when the caller has it (it recorded the
    experiment); otherwise it is read from the store.

    Raises:
        ExperimentBusyError: another live process already runs the experiment.
        LauncherReplacedError: another launcher took the experiment over meanwhile (this
            one's heartbeat had lapsed): the trials' processes here were ended, nothing
            more was recorded.
        StoreUnavailableError: the store's database server stopped answering for longer
            than the store waits (``RECONNECT_SECONDS``): the trials' processes were ended,
            and the experiment is left to ``experiment resume``.
    """
    lifecycle = RunLifecycle(store)
    retry = lifecycle.begin_experiment(experiment_id) == State.ERROR
    experiment = store.experiment(experiment_id)
    if config is None:
        config = load_experiment_config(experiment.config)
    loop = _ExperimentLoop(store, experiment, config, display, verbose, retry)
    state, recordable = State.ERROR, True
    try:
        state = loop.run()
    except LauncherReplacedError:
        # The experiment is the other launcher's now, its runs included: this one ends its
        # trials' processes and records nothing, so that no trial runs twice for long.
        recordable = False
        raise
    except StoreUnavailableError as error:
        # Nothing more can be recorded: the experiment stays ACTIVE, and reads INTERRUPTED
        # once this process has ended, as after a launcher that was killed.
        recordable = False
        raise StoreUnavailableError(
            f"{error} Experiment {experiment_id} stopped, its trials' processes ended; once the database answers "
            f"again, `det-estimator experiment resume {experiment_id}` goes on from its trials' latest checkpoints."
        ) from None
    finally:
        loop.stop_all()
        if recordable:
            _show_deleted(display, lifecycle.end_experiment(experiment_id, state, config))
    return state


def _show_deleted(display: Display, deleted: list[str]) -> None:
    """Says how many checkpoints the retention of a completed experiment deleted."""
    if deleted:
        display.message(
            f"Deleted {len(deleted)} checkpoint{'s' if len(deleted) > 1 else ''} that checkpoint_storage keeps only "
            "while the experiment runs (save_trial_latest, save_trial_best, save_experiment_best)."
        )


class _ExperimentLoop:
    """Launches queued trials into free slots, answers their reports, reaps them, until the search ends."""

    def __init__(
        self,
        store: ExperimentStore,
        experiment: ExperimentRecord,
        config: ExperimentConfig,
        display: Display,
        verbose: bool,
        retry: bool,
    ):
        self._store = store
        self._experiment = experiment
        self._display = display
        self._verbose = verbose
        self._config = config
        storage = checkpoint_storage_root(self._config, experiment.context_dir)
        self._search = SearchRunner(store, experiment, self._config, storage, retry)
        self._slots = SlotPool(experiment.slots, experiment.hosts)
        self._per_trial = self._config.resources.slots_per_trial
        # The config's environment variables, for the kind of device the slots are.
        self._environment = self._config.environment.variables_for(device_type())
        self._running: dict[int, TrialProcess] = {}
        self._pausing = False
        # When the pause was asked for (by a signal or `experiment pause`), and whether the
        # hint that a signal now stops the trials at once was shown.
        self._pausing_since: Optional[float] = None
        self._stop_hint_shown = False
        self._follower = StoreFollower(store, experiment.id, since=time.time())
        # This process, as the claim recorded it: a record naming another launcher later
        # means the experiment was taken over.
        self._launcher = (experiment.launcher_pid, experiment.launcher_host)

    def _recover(self) -> None:
        """Picks up a search whose launcher died: its trials' processes are gone, their reports unanswered."""
        for trial in self._store.trials(self._experiment.id):
            if trial.search_state == SearchState.RUNNING:
                self._store.set_search_state(trial.id, SearchState.QUEUED)
            if trial.reported_length is not None and trial.answered_length != trial.reported_length:
                self._search.on_reported(self._store.trial(trial.id))

    def run(self) -> State:
        self._recover()
        with launcher.pause_on_signals(self._on_signal):
            while True:
                experiment = self._store.experiment(self._experiment.id)
                self._check_still_its_launcher(experiment)
                if not self._pausing and experiment.pause_requested_at is not None:
                    self._request_pause()
                self._hint_at_stopping()
                self._answer_reports()
                self._reap()
                self._search.close_idle(set(self._running))
                launched = self._launch_queued()
                self._show()
                if (
                    not self._running
                    and not launched
                    and (self._search.shutdown or self._pausing or not self._queued())
                ):
                    break
                time.sleep(_POLL_SECONDS)
        self._show()
        if self._search.shutdown:
            if self._search.shutdown_reason:
                self._display.message(self._search.shutdown_reason)
            return State.ERROR if self._search.failed or self._every_trial_failed() else State.COMPLETED
        if self._pausing:
            return State.PAUSED
        raise RuntimeError(  # a search method that neither shuts down nor gives work: a bug of ours
            f"The search of experiment {self._experiment.id} stopped giving trials work before it ended."
        )

    def _check_still_its_launcher(self, experiment: ExperimentRecord) -> None:
        """Raises :class:`LauncherReplacedError` if the store names another launcher of the experiment now."""
        launcher = (experiment.launcher_pid, experiment.launcher_host)
        if launcher != self._launcher:
            raise LauncherReplacedError(
                f"Experiment {experiment.id} was taken over by process {launcher[0]} on {launcher[1]}, as this "
                "launcher's heartbeat had not reached the store for longer than "
                f"the lease ({LEASE_SECONDS:.0f} s). Its trials' processes here were ended and nothing more was "
                "recorded from here; it goes on there."
            )

    def _every_trial_failed(self) -> bool:
        """Whether every trial ended in ERROR, some after the search had what it needed of them.

        A trial that completed its searcher operation and then failed (a script raising
        after its training, say) leaves the search content; the experiment still failed.
        """
        trials = self._store.trials(self._experiment.id)
        return bool(trials) and all(trial.state == State.ERROR for trial in trials)

    def _on_signal(self) -> None:
        """SIGINT or SIGTERM: a pause; repeated once the pause has had time, the trials' processes end at once."""
        if self._pause_is_slow():
            if all(process.stopped for process in self._running.values()):
                return  # already ending
            self._display.message(
                "Stopping now: the trial's processes are ended without a checkpoint; a resume goes on from the "
                "latest one."
            )
            for process in self._running.values():
                process.stop()
            return
        self._request_pause()

    def _pause_is_slow(self) -> bool:
        """Whether trials still run a pause asked for at least ``_STOP_AFTER_SECONDS`` ago."""
        if self._pausing_since is None or not self._running:
            return False
        return time.monotonic() - self._pausing_since >= _STOP_AFTER_SECONDS

    def _hint_at_stopping(self) -> None:
        """Says, once, that a pause takes long (a trial has not written its checkpoint yet), and how to stop at once."""
        if not self._stop_hint_shown and self._pause_is_slow() and not self._pause_checkpoints_written():
            self._stop_hint_shown = True
            self._display.message(
                f"Still pausing after {_STOP_AFTER_SECONDS:.0f} s (a process may be stuck): Ctrl-C again stops the "
                "trial at once, without a checkpoint."
            )

    def _pause_checkpoints_written(self) -> bool:
        """Whether every running trial has written its pause's checkpoint, and its processes are only exiting.

        A trial acknowledges the pause once its checkpoint is written; its processes may
        take a while yet to end (several of them, under horovodrun), which is no sign of
        a stuck process.
        """
        runs = (self._store.trial_run(process.info.require_trial().run_id) for process in self._running.values())
        return all(run.preempted for run in runs)

    def _request_pause(self) -> None:
        if not self._pausing:
            self._pausing = True
            self._pausing_since = time.monotonic()
            who = (
                "the trial finishes its batch and writes"
                if len(self._running) <= 1
                else "the trials finish their batch and write"
            )
            self._display.message(f"Pausing: {who} a checkpoint...")
        for process in self._running.values():
            process.request_pause()

    def _answer_reports(self) -> None:
        for trial in self._store.trials(self._experiment.id):
            unanswered = trial.reported_length is not None and trial.answered_length != trial.reported_length
            if trial.id in self._running and unanswered:
                self._search.on_reported(trial)

    def _reap(self) -> None:
        for trial_id, process in list(self._running.items()):
            process.watch_for_hang()
            if process.poll() is None:
                continue
            finished = process.finish()
            self._slots.release(process.allocation)
            del self._running[trial_id]
            runs = self._store.trial_runs(trial_id)
            run = runs[-1]
            invalid_hp = run.error is not None and RunError.from_record(run.error).kind == ErrorKind.INVALID_HP
            if finished.state == State.ERROR and not invalid_hp and self._restart(trial_id, runs, finished):
                continue
            self._search.on_run_ended(process.trial, finished.state, invalid_hp=invalid_hp)

    def _restart(self, trial_id: int, runs: list[TrialRunRecord], finished: FinishedRun) -> bool:
        """Queues a failed trial again, to run from its latest valid checkpoint; False when it may not.

        Up to ``max_restarts`` times per trial, as the reference, but only where a restart
        can help (see :func:`~det_estimator.orchestration._restarts.why_not_restart`): not
        for a failure that would repeat. Not while pausing, nor once the search has ended
        or has closed the trial.
        """
        trial = self._store.trial(trial_id)
        limit = self._config.max_restarts
        if self._pausing or self._search.shutdown or trial.search_state != SearchState.RUNNING:
            return False
        failed = runs[-1]
        cause = restart_cause(failed, finished.first_failure)
        previous = runs[-2] if len(runs) > 1 and runs[-2].state == State.ERROR else None
        refusal = why_not_restart(Failure(failed, finished.trained, previous)) if limit else None
        if refusal is not None:
            self._display.message(f"trial {trial_id} failed ({cause}); not restarted: {refusal}")
            return False
        if trial.restarts >= limit:
            if limit:
                self._display.message(f"trial {trial_id} failed again; its {limit} restart(s) are used up")
            return False
        number = self._store.count_restart(trial_id, failed.id, cause)
        self._store.set_search_state(trial_id, SearchState.QUEUED)
        kept = self._store.checkpoints(trial.experiment_id, trial_id=trial_id)
        self._display.message(
            f"trial {trial_id} failed ({cause}); restart {number} of {limit}, "
            f"{resumes_from(kept[-1] if kept else None)}"
        )
        return True

    def _queued(self) -> list[TrialRecord]:
        return [
            trial
            for trial in self._store.trials(self._experiment.id)
            if trial.search_state == SearchState.QUEUED
            and trial.target_length is not None
            and trial.id not in self._running
        ]

    def _launch_queued(self) -> int:
        if self._pausing or self._search.shutdown:
            return 0
        launched = 0
        for trial in self._queued():
            allocation = self._slots.allocate(self._per_trial)
            if allocation is None:
                break
            self._store.set_search_state(trial.id, SearchState.RUNNING)
            process = TrialProcess.launch(
                self._store,
                self._experiment,
                trial,
                allocation,
                self._display,
                self._verbose,
                self._environment,
                hang_timeout_seconds=self._config.hang_timeout_seconds,
            )
            self._running[trial.id] = process
            launched += 1
        return launched

    def _show(self) -> None:
        for event in self._follower.poll():
            self._display.show(event)

    def stop_all(self) -> None:
        """Ends what still runs (this process is leaving on an error of its own)."""
        for process in self._running.values():
            process.kill()
        for process in self._running.values():
            process.close_log()


@contextlib.contextmanager
def in_process_run(store: ExperimentStore, experiment_id: int, display: Display) -> Iterator[_info.ClusterInfo]:
    """Runs an experiment's trial in this very process: yields its info, records its end.

    For ``run_trial`` on one slot and ``det.init(local=True)``: the caller runs the
    trial inside the ``with`` block. A thread follows the store and shows the events on
    ``display`` meanwhile. An exception from the block is recorded as the run's error
    and raised again.
    """
    experiment = store.experiment(experiment_id)
    if experiment.config["searcher"]["name"] != "single":
        raise DetEstimatorError(
            f"A {experiment.config['searcher']['name']} search runs its trials in processes of their own: run it "
            "with `det-estimator experiment create CONFIG CONTEXT_DIR`. In this process runs a `single` searcher."
        )
    lifecycle = RunLifecycle(store)
    info = lifecycle.begin(experiment_id, store.trials(experiment_id)[0].id, owns_experiment=True)
    run_id = info.require_trial().run_id
    since = store.trial_run(run_id).started_at
    stop = threading.Event()
    shown = threading.Thread(target=_follow_in_thread, args=(store, experiment_id, since, display, stop))
    shown.daemon = True
    _info.set_in_process(info)
    ending = Ending()
    shown.start()
    try:
        yield info
    except BaseException as error:
        ending = Ending(error=error)
        lifecycle.record_error(run_id, RunError.of(error, 0))
        raise
    finally:
        _info.set_in_process(None)
        state = lifecycle.end(info, ending)
        _show_deleted(display, lifecycle.end_experiment(experiment_id, state))
        stop.set()
        shown.join(timeout=30)


def _follow_in_thread(
    store: ExperimentStore, experiment_id: int, since: float, display: Display, stop: threading.Event
) -> None:
    with store.for_thread() as own:  # made in this thread, which its connection serves
        follower = StoreFollower(own, experiment_id, since)
        while True:
            stopping = stop.wait(_POLL_SECONDS)
            for event in follower.poll():
                display.show(event)
            if stopping:
                return

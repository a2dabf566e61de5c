"""What the store returns: one frozen record type per table, and the states they share."""

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from det_estimator._host_list import HostSlots


class State(str, enum.Enum):
    """The state of an experiment, a trial or a trial run; the trial controllers and the store share it.

    A ``str`` enum: ``State.COMPLETED == "COMPLETED"``, and JSON shows the name.
    """

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"
    # Shown, never stored: an ACTIVE experiment whose launcher no longer runs (killed,
    # or its machine went down). It can be resumed from its latest checkpoint.
    INTERRUPTED = "INTERRUPTED"

    def __str__(self) -> str:
        return self.value

    @property
    def is_final(self) -> bool:
        """Whether nothing runs any more (the end of a run: completed, paused or failed)."""
        return self in (State.COMPLETED, State.PAUSED, State.ERROR)


class SearchState(str, enum.Enum):
    """Where a trial stands in its experiment's search.

    QUEUED: it has an operation to train towards and waits for slots. RUNNING: its
    processes run. WAITING: it finished its operation and waits for the search to give
    it another (promotion-based ASHA), holding no slot. CLOSING: the search is done with
    it, and it is told once its processes end. CLOSED: the search is done with it.
    EXITED: it ended early (failed, or its hyperparameters were invalid).
    """

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"
    EXITED = "EXITED"

    def __str__(self) -> str:
        return self.value


class MetricKind(str, enum.Enum):
    """Which metrics a row holds."""

    TRAINING = "training"
    VALIDATION = "validation"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TrialRecord:
    """One trial of an experiment.

    Attributes:
        batches_trained: batches trained so far (updated as the trial reports progress).
        max_batches: the batches it trains in all, once its run has started.
        checkpoint_dir: where its checkpoints are written.
        log_path: the file that keeps everything its processes printed.
        request_id: its number in the experiment's search (0, 1, ...).
        search_state: where it stands in the search.
        target_length: the length (in the unit of ``searcher.max_length``) of the
            operation it trains towards, if it has one.
        reported_length: the length of the last operation it completed.
        reported_metric: the searcher metric it reported then.
        answered_length: the last reported length the search has answered.
        restarts: how many times it was restarted after a failure.
    """

    id: int
    experiment_id: int
    state: State
    hparams: dict[str, Any]
    seed: int
    checkpoint_dir: str
    log_path: str
    batches_trained: int
    max_batches: Optional[int]
    created_at: float
    ended_at: Optional[float]
    request_id: Optional[int] = None
    search_state: Optional[SearchState] = None
    target_length: Optional[int] = None
    reported_length: Optional[int] = None
    reported_metric: Optional[float] = None
    answered_length: Optional[int] = None
    restarts: int = 0

    @property
    def tensorboard_dir(self) -> str:
        """Where the trial's metrics are written as TensorBoard event files."""
        return str(Path(self.log_path).parent / "tensorboard")


@dataclass(frozen=True)
class ExperimentRecord:
    """One experiment, with the sums of its trials' progress.

    Attributes:
        entrypoint: ``module:TrialClass``, or the command a script experiment runs.
        command: the command line of a script experiment (run on every slot); None when
            det-estimator's worker runs a trial class.
        run_key: set for runs that resume by name (``run_trial``, ``det.init(local=True)``).
        launcher_pid, launcher_host: the process that runs it now (which ``pause`` and
            the INTERRUPTED check look at).
        pause_requested_at: when ``experiment pause`` asked it to stop, if it did.
        trial_class: how a worker imports the trial class (module, qualname, file,
            sys_path), when it is not the config's entrypoint.
    """

    id: int
    name: str
    state: State
    config: dict[str, Any]
    context_dir: str
    entrypoint: str
    command: Optional[list[str]]
    slots: int
    hosts: Optional[tuple[HostSlots, ...]]
    test: bool
    created_at: float
    ended_at: Optional[float]
    launcher_pid: Optional[int]
    launcher_host: Optional[str]
    run_key: Optional[str]
    pause_requested_at: Optional[float]
    trial_class: Optional[dict[str, Any]] = None
    batches_trained: int = 0
    max_batches: Optional[int] = None
    num_trials: int = 0

    @property
    def searcher_metric(self) -> str:
        """The validation metric the experiment is judged by."""
        return self.config["searcher"]["metric"]

    @property
    def smaller_is_better(self) -> bool:
        """Whether a smaller ``searcher_metric`` is better."""
        return bool(self.config["searcher"].get("smaller_is_better", True))

    @property
    def is_search(self) -> bool:
        """Whether the experiment runs several trials, or may: any searcher but ``single``.

        Its searcher says so, not the trials recorded so far: a search that runs one trial
        at a time has recorded only its first for a while.
        """
        return (self.config.get("searcher") or {}).get("name", "single") != "single" or self.num_trials > 1


@dataclass(frozen=True)
class MetricRecord:
    """A workload's training metrics or a validation's metrics."""

    id: int
    trial_id: int
    kind: MetricKind
    batches: int
    metrics: dict[str, Any]
    recorded_at: float
    run_id: Optional[int] = None


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint that was sealed; ``state`` is DELETED once retention removed its files."""

    uuid: str
    trial_id: int
    batches: int
    state: str
    validation_metrics: Optional[dict[str, Any]]
    size_bytes: int
    path: str
    created_at: float
    run_id: Optional[int] = None
    metadata: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class TrialRunRecord:
    """One run of a trial: from a launch (or a resume, or a restart) to the end of its processes.

    Attributes:
        preempted: the run acknowledged a pause request, so exiting cleanly means PAUSED.
        exit_status: how its launched processes exited (None for a run in the caller's process).
        start_batches: the batches of the checkpoint it resumed from (0 for a fresh start).
        error: the failing process's error, as it recorded it (rank, exception, traceback).
    """

    id: int
    trial_id: int
    started_at: float
    ended_at: Optional[float]
    state: State
    preempted: bool
    exit_status: Optional[int]
    error: Optional[dict[str, Any]]
    start_batches: int = 0


@dataclass(frozen=True)
class NewTrial:
    """A trial a search step creates."""

    request_id: int
    hparams: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class Assignment:
    """What a search step tells one trial, by its request id.

    Attributes:
        target_length: the operation it trains towards next, or None for none now.
        search_state: where it stands in the search after the step.
        answered_length: the reported length this step answers, if it answers one.
    """

    request_id: int
    target_length: Optional[int]
    search_state: SearchState
    answered_length: Optional[int] = None


@dataclass(frozen=True)
class BestValidation:
    """The best value of the searcher metric over an experiment's validations."""

    metric: str
    value: float
    batches: int
    trial_id: int


def to_json_value(record: Any) -> Any:
    """A record (or list of records) as JSON-ready data: enums as their names, NaN and infinities as None.

    JSON has no NaN; a metric that is NaN (an AUC over one class, say) is written ``null``.
    """
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        value = {item.name: getattr(record, item.name) for item in dataclasses.fields(record)}
        return to_json_value(value)
    if isinstance(record, enum.Enum):
        return record.value
    if isinstance(record, dict):
        return {key: to_json_value(item) for key, item in record.items()}
    if isinstance(record, (list, tuple)):
        return [to_json_value(item) for item in record]
    if isinstance(record, float) and not math.isfinite(record):
        return None
    return record

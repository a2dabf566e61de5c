"""Following an experiment as it runs: typed events read from the store, whichever process wrote them.

The store is the one channel from the trial's processes to whoever watches: the chief
records progress, metrics and checkpoints there, on this machine or another, and the
follower turns what is new since its last look into events. The same events drive the
live display on one slot, on several and on several hosts.
"""

import time
from dataclasses import dataclass
from typing import Any, Optional, Union

from det_estimator.store import ExperimentStore, MetricKind, SearchState, State


@dataclass(frozen=True)
class TrialStarted:
    """A trial's run started training, with ``batches_done`` of ``max_batches`` behind it."""

    trial_id: int
    batches_done: int
    max_batches: Optional[int]
    at: float


@dataclass(frozen=True)
class Progress:
    """A trial has trained ``batches`` of ``max_batches``."""

    trial_id: int
    batches: int
    max_batches: Optional[int]
    at: float


@dataclass(frozen=True)
class MetricsReported:
    """A trial reported training metrics (after a workload) or a validation."""

    trial_id: int
    kind: MetricKind
    batches: int
    metrics: dict[str, Any]
    at: float


@dataclass(frozen=True)
class CheckpointSaved:
    """A trial sealed a checkpoint."""

    trial_id: int
    uuid: str
    batches: int
    path: str
    at: float


@dataclass(frozen=True)
class TrialEnded:
    """A trial's run ended in ``state``, after ``batches``; ``search_state`` says what the search makes of it."""

    trial_id: int
    state: State
    at: float
    batches: int = 0
    search_state: Optional[SearchState] = None
    error: Optional[str] = None


Event = Union[TrialStarted, Progress, MetricsReported, CheckpointSaved, TrialEnded]


class StoreFollower:
    """Reads what is new about an experiment's trials each time :meth:`poll` is called.

    Args:
        store: the store (a connection of the thread that polls).
        experiment_id: the experiment to follow.
        since: only what was recorded after this time (the start of the runs followed).
    """

    def __init__(self, store: ExperimentStore, experiment_id: int, since: float) -> None:
        self._store = store
        self._experiment_id = experiment_id
        self._since = since
        self._last_metric: dict[tuple[int, MetricKind], int] = {}
        self._seen_checkpoints: set[str] = set()
        self._progress: dict[int, tuple[int, Optional[int]]] = {}
        self._started: dict[int, int] = {}  # trial id -> the run whose TrialStarted was sent
        self._states: dict[int, tuple[int, State]] = {}

    def poll(self) -> list[Event]:
        """The events since the last call, in the order they were recorded (``at``)."""
        events: list[Event] = []
        for trial in self._store.trials(self._experiment_id):
            events.extend(self._trial_events(trial))
        return sorted(events, key=lambda event: event.at)

    def _trial_events(self, trial: Any) -> list[Event]:
        events: list[Event] = []
        runs = [run for run in self._store.trial_runs(trial.id) if run.started_at >= self._since]
        if not runs:
            return events
        now = time.time()
        for kind in (MetricKind.TRAINING, MetricKind.VALIDATION):
            events.extend(self._new_metrics(trial.id, kind, [run.id for run in runs]))
        for checkpoint in self._store.checkpoints(trial.experiment_id, include_deleted=True, trial_id=trial.id):
            if checkpoint.uuid not in self._seen_checkpoints and checkpoint.created_at >= self._since:
                self._seen_checkpoints.add(checkpoint.uuid)
                events.append(
                    CheckpointSaved(
                        trial.id, checkpoint.uuid, checkpoint.batches, checkpoint.path, checkpoint.created_at
                    )
                )
        # Read again after the reports, so that its length is the one they were trained
        # towards (a run records its new length before training towards it).
        trial = self._store.trial(trial.id)
        progress = (trial.batches_trained, trial.max_batches)
        # Before this poll's reports, which it concerns: a line shown with the old length
        # of a trial given a new one would read "10/8 batches".
        progress_at = min([now] + [event.at for event in events])
        # Every run starts anew, not only the first: a trial promoted by the search, or
        # restarted after a failure, goes on from its checkpoint in a run of its own.
        if self._started.get(trial.id) != runs[-1].id and trial.max_batches is not None:
            events.append(TrialStarted(trial.id, runs[-1].start_batches, trial.max_batches, runs[-1].started_at))
            self._started[trial.id] = runs[-1].id
            self._progress[trial.id] = progress
        if trial.id in self._progress and self._progress[trial.id] != progress:
            self._progress[trial.id] = progress
            events.insert(0, Progress(trial.id, *progress, progress_at))  # first among equal times too
        latest = runs[-1]
        if latest.state.is_final and self._states.get(trial.id) != (latest.id, latest.state):
            self._states[trial.id] = (latest.id, latest.state)
            error = (
                None
                if latest.error is None
                else f"{latest.error.get('type') or 'error'}: {latest.error.get('message')}"
            )
            events.append(
                TrialEnded(
                    trial.id, latest.state, latest.ended_at or now, trial.batches_trained, trial.search_state, error
                )
            )
        return events

    def _new_metrics(self, trial_id: int, kind: MetricKind, run_ids: list[int]) -> list[Event]:
        key = (trial_id, kind)
        records = [
            record
            for record in self._store.metrics(trial_id, kind, after_id=self._last_metric.get(key, 0))
            if record.run_id in run_ids
        ]
        if records:
            self._last_metric[key] = max(record.id for record in records)
        return [
            MetricsReported(trial_id, kind, record.batches, record.metrics, record.recorded_at) for record in records
        ]

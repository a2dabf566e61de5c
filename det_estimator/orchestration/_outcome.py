"""TrialOutcome: how a run of a trial ended, read back from the store; and an experiment's summary."""

from dataclasses import dataclass, field
from typing import Any, Optional

from det_estimator._saved_models import saved_models_of
from det_estimator.store import (
    BestValidation,
    CheckpointRecord,
    ExperimentRecord,
    ExperimentStore,
    MetricKind,
    State,
    TrialRecord,
)


@dataclass
class TrialOutcome:
    """How a run of a trial ended: its state, and what it reported during that run.

    Attributes:
        state: COMPLETED, PAUSED (after a pause request) or ERROR.
        batches_trained: the trial's batches so far, in all its runs.
        training: this run's training reports, ``{"batches", "metrics"}`` each.
        validations: this run's validations, ``{"batches", "metrics"}`` each.
        checkpoints: this run's checkpoints still kept, ``{"uuid", "path", "batches"}`` each.
        trial_id: the trial's id in the store.
        experiment_id: its experiment's id.
    """

    state: State
    batches_trained: int
    training: list[dict[str, Any]] = field(default_factory=list)
    validations: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    trial_id: Optional[int] = None
    experiment_id: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        """The outcome as JSON-ready data."""
        return {
            "state": State(self.state).value,
            "batches_trained": self.batches_trained,
            "training": self.training,
            "validations": self.validations,
            "checkpoints": self.checkpoints,
            "trial_id": self.trial_id,
            "experiment_id": self.experiment_id,
        }


def trial_outcome(store: ExperimentStore, trial_id: int, run_id: int) -> TrialOutcome:
    """The outcome of run ``run_id`` of a trial, from what the store recorded."""
    trial = store.trial(trial_id)
    run = store.trial_run(run_id)

    def reports(kind: MetricKind) -> list[dict[str, Any]]:
        return [{"batches": m.batches, "metrics": m.metrics} for m in store.metrics(trial_id, kind, run_id=run_id)]

    kept = [c for c in store.checkpoints(trial.experiment_id, trial_id=trial_id) if c.run_id == run_id]
    return TrialOutcome(
        state=run.state,
        batches_trained=trial.batches_trained,
        training=reports(MetricKind.TRAINING),
        validations=reports(MetricKind.VALIDATION),
        checkpoints=[{"uuid": c.uuid, "path": c.path, "batches": c.batches} for c in kept],
        trial_id=trial_id,
        experiment_id=trial.experiment_id,
    )


@dataclass(frozen=True)
class ExperimentSummary:
    """What the command shows when an experiment's run ends.

    Attributes:
        saved_models: for each kept checkpoint's uuid, its SavedModels by serving name.
    """

    experiment: ExperimentRecord
    trials: list[TrialRecord]
    best_validation: Optional[BestValidation]
    checkpoints: list[CheckpointRecord]
    saved_models: dict[str, dict[str, str]]


def summarize(store: ExperimentStore, experiment_id: int) -> ExperimentSummary:
    """The experiment's state, best validation and kept checkpoints (with their SavedModels)."""
    checkpoints = store.checkpoints(experiment_id)
    return ExperimentSummary(
        experiment=store.experiment(experiment_id),
        trials=store.trials(experiment_id),
        best_validation=store.best_validation(experiment_id),
        checkpoints=checkpoints,
        saved_models={c.uuid: {name: str(path) for name, path in saved_models_of(c.path).items()} for c in checkpoints},
    )

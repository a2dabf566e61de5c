"""Checkpoint retention: what ``checkpoint_storage`` keeps, while a trial trains and once its experiment completes.

One rule, applied in two moments: after each checkpoint a trial writes (by its core
context, :meth:`RetentionPolicy.not_kept` on that trial), and once, when the
experiment completes (by the run lifecycle, :func:`delete_checkpoints_not_kept` over
all its trials).
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from det_estimator.checkpoint import Checkpoint, TrialCheckpoints
from det_estimator.config import ExperimentConfig
from det_estimator.lifecycle._store import RunStore

logger = logging.getLogger("det_estimator.lifecycle")


@dataclass(frozen=True)
class RetentionPolicy:
    """Which checkpoints to keep, from the config's ``checkpoint_storage`` and ``searcher``.

    Attributes:
        save_trial_latest: the most recent checkpoints of the trial to keep (at least 1
            while it trains, so that it can resume).
        save_trial_best: the trial's best checkpoints by the searcher metric to keep.
        save_experiment_best: the experiment's best checkpoints (over all its trials) to keep.
        metric: the searcher metric.
        smaller_is_better: how it compares.
    """

    save_trial_latest: int = 1
    save_trial_best: int = 1
    save_experiment_best: int = 0
    metric: Optional[str] = None
    smaller_is_better: bool = True

    @classmethod
    def of(cls, config: ExperimentConfig) -> "RetentionPolicy":
        """The policy ``config`` sets."""
        storage, searcher = config.checkpoint_storage, config.searcher
        return cls(
            save_trial_latest=storage.save_trial_latest,
            save_trial_best=storage.save_trial_best,
            save_experiment_best=storage.save_experiment_best,
            metric=searcher.metric,
            smaller_is_better=searcher.smaller_is_better,
        )

    def experiment_best(self, store: RunStore, experiment_id: int) -> set[str]:
        """The uuids of the experiment's ``save_experiment_best`` best checkpoints, over all its trials."""
        if not self.save_experiment_best or not self.metric:
            return set()
        return store.best_checkpoints(experiment_id, self.metric, self.smaller_is_better, self.save_experiment_best)

    def not_kept(
        self, checkpoints: TrialCheckpoints, experiment_best: set[str], experiment_completed: bool
    ) -> list[Checkpoint]:
        """The checkpoints of one trial this policy does not keep, oldest first (left in place).

        While the experiment may still go on, the latest checkpoint is kept whatever
        ``save_trial_latest`` says, so that the trial can resume, and so are the
        experiment's best (``experiment_best``), which later trials may still beat. Once
        it has completed, nothing resumes: as in the reference system, ``save_trial_latest:
        0`` lets the latest go too.
        """
        return checkpoints.to_prune(
            save_latest=self.save_trial_latest if experiment_completed else max(self.save_trial_latest, 1),
            save_best=self.save_trial_best if self.metric else 0,
            metric=self.metric,
            smaller_is_better=self.smaller_is_better,
            keep=experiment_best,
        )


def delete_checkpoints_not_kept(store: RunStore, experiment_id: int, policy: RetentionPolicy) -> list[str]:
    """Applies ``policy`` to every trial of a completed experiment; returns the uuids deleted.

    Every trial then keeps just its ``save_trial_latest`` most recent and
    ``save_trial_best`` best checkpoints, and the experiment its ``save_experiment_best``
    best over all trials (all three 0: none at all). A checkpoint is marked deleted in
    the store before its files go, so that a store that cannot be written leaves the
    files rather than a record of files that are gone; files that cannot be deleted are
    left with a warning (the experiment is done and recorded). Nothing is deleted in a
    folder of another store, nor by a copy of a store (``RunStore.own_folders`` refuses).
    """
    store.own_folders(experiment_id, make=False)
    keep = policy.experiment_best(store, experiment_id)
    deleted: list[str] = []
    for trial in store.trials(experiment_id):
        if not Path(trial.checkpoint_dir).is_dir():
            continue
        checkpoints = TrialCheckpoints(trial.checkpoint_dir)
        gone = policy.not_kept(checkpoints, keep, experiment_completed=True)
        store.mark_checkpoints_deleted([checkpoint.uuid for checkpoint in gone])
        deleted.extend(checkpoint.uuid for checkpoint in gone)
        try:
            for checkpoint in gone:
                checkpoints.delete(checkpoint)
        except OSError as error:
            logger.warning("Checkpoints of trial %d that checkpoint_storage does not keep remain: %s", trial.id, error)
    return deleted

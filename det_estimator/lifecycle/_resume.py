"""Where a new run of a trial resumes from: its latest checkpoint whose checksums hold."""

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from det_estimator.checkpoint import Checkpoint, TrialCheckpoints
from det_estimator.lifecycle._store import RunStore
from det_estimator.store import ExperimentRecord, StoreUnusableError, TrialRecord

logger = logging.getLogger("det_estimator.lifecycle")


def resume_point(store: RunStore, trial: TrialRecord) -> Optional[Checkpoint]:
    """The checkpoint a new run of ``trial`` resumes from, or None to start afresh.

    What interrupted writes left is removed, and the latest checkpoint whose checksums
    hold is chosen. Newer ones failed verification: they are moved aside
    (``.corrupt-<uuid>``, files kept) so that they are never resumed from nor counted by
    retention, where a corrupt checkpoint with more batches could otherwise get the
    valid ones written after it deleted.
    """
    checkpoints = TrialCheckpoints(trial.checkpoint_dir)
    checkpoints.remove_partials()
    latest = checkpoints.latest_valid()
    listed = checkpoints.list()
    newer = listed[listed.index(latest) + 1 :] if latest is not None else listed
    for checkpoint in newer:
        moved = checkpoints.quarantine(checkpoint)
        logger.warning("checkpoint %s failed verification; moved to %s", checkpoint.uuid, moved)
    if newer:
        store.mark_checkpoints_deleted([checkpoint.uuid for checkpoint in newer])
    _forget_checkpoints_gone(store, trial, latest)
    return latest


def remove_leftovers(
    store: RunStore, experiments: Sequence[ExperimentRecord], trials: Sequence[TrialRecord]
) -> list[Path]:
    """Removes what killed checkpoint writes and deletions left in the trials of experiments that are not running.

    A run SIGKILLed while it wrote or deleted a checkpoint leaves a hidden ``.partial-*``
    or ``.deleting-*`` folder, which its own resume removes; an experiment never resumed
    kept it for good. Experiments whose state is final (completed, paused, failed) have no
    process that writes there; a running one is left alone, and so is one whose folders
    belong to another store, or whose store is a copy.

    Args:
        store: the store the experiments are recorded in.
        experiments: the experiments to sweep, as read (their state as seen then).
        trials: their trials, as read (others are ignored): the caller reads every
            experiment and trial in a query each, where reading them here would take
            queries per experiment, seconds for a store of a thousand.

    Returns:
        The paths removed.
    """
    of_experiment: dict[int, list[TrialRecord]] = {experiment.id: [] for experiment in experiments}
    for trial in trials:
        of_experiment.setdefault(trial.experiment_id, []).append(trial)
    removed: list[Path] = []
    for experiment in experiments:
        if not experiment.state.is_final:
            continue
        its_trials = of_experiment[experiment.id]
        on_disk = [trial for trial in its_trials if Path(trial.checkpoint_dir).is_dir()]
        if not on_disk:  # nothing to sweep: no owner to read either
            continue
        try:
            store.own_folders(experiment.id, make=False, trials=its_trials)
        except StoreUnusableError as error:  # a copy of a store, or a folder of another store
            logger.info("left leftovers of experiment %d: %s", experiment.id, error)
            continue
        for trial in on_disk:
            try:
                removed.extend(TrialCheckpoints(trial.checkpoint_dir).remove_partials())
            except OSError as error:  # a folder of another user, say: left for its own resume
                logger.info("could not remove leftovers in %s: %s", trial.checkpoint_dir, error)
    return removed


def _forget_checkpoints_gone(store: RunStore, trial: TrialRecord, latest: Optional[Checkpoint]) -> None:
    """Marks deleted the checkpoints the store records for ``trial`` whose directories are gone.

    Their files were deleted by hand (or their storage is no longer mounted). When one is
    newer than the checkpoint the run resumes from, the run would otherwise go back
    without a word: a warning names it and says where the run resumes from instead.
    """
    recorded = store.checkpoints(trial.experiment_id, trial_id=trial.id)
    gone = [checkpoint for checkpoint in recorded if not Path(checkpoint.path).is_dir()]
    if not gone:
        return
    store.mark_checkpoints_deleted([checkpoint.uuid for checkpoint in gone])
    skipped = [checkpoint for checkpoint in gone if latest is None or checkpoint.batches > latest.steps_completed]
    if not skipped:
        return
    named = " and ".join(f"{checkpoint.uuid} after {checkpoint.batches} batches" for checkpoint in reversed(skipped))
    if len(skipped) == 1:
        what = f"The latest checkpoint of trial {trial.id}, {named}, is gone: {skipped[0].path} no longer exists."
    else:
        what = (
            f"The latest checkpoints of trial {trial.id}, {named}, are gone: their directories in "
            f"{trial.checkpoint_dir} no longer exist."
        )
    if latest is None:
        instead = f"Trial {trial.id} starts again from batch 0 instead: no earlier checkpoint of it is left."
    else:
        instead = (
            f"Trial {trial.id} resumes from checkpoint {latest.uuid} after {latest.steps_completed} batches "
            "instead, and trains the batches after it again."
        )
    logger.warning("%s %s", what, instead)

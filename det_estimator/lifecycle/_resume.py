"""Where a new run of a trial resumes from: its latest checkpoint whose checksums hold."""

import logging
from pathlib import Path
from typing import Optional

from det_estimator.checkpoint import Checkpoint, TrialCheckpoints
from det_estimator.lifecycle._store import RunStore
from det_estimator.store import TrialRecord

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

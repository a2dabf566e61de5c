"""One run of a trial: where it resumes from, the info its processes get, and how its end is recorded."""

import logging
from pathlib import Path
from typing import Optional

from det_estimator._info import TRIAL_TASK, ClusterInfo, TrialClassSpec, TrialInfo
from det_estimator.checkpoint import Checkpoint, TrialCheckpoints
from det_estimator.config import ExperimentConfig, load_experiment_config
from det_estimator.store import ExperimentRecord, ExperimentStore, State, TrialRecord

logger = logging.getLogger("det_estimator.orchestration")


def resume_point(store: ExperimentStore, trial: TrialRecord) -> Optional[Checkpoint]:
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


def _forget_checkpoints_gone(store: ExperimentStore, trial: TrialRecord, latest: Optional[Checkpoint]) -> None:
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


def begin_run(
    store: ExperimentStore,
    experiment: ExperimentRecord,
    trial: TrialRecord,
    pause_file: Optional[str] = None,
    container_addrs: tuple[str, ...] = ("localhost",),
) -> ClusterInfo:
    """Records a new run of ``trial`` and returns the info its processes get."""
    latest = resume_point(store, trial)
    run_id = store.start_run(trial.id, 0 if latest is None else latest.steps_completed)
    store.set_trial_state(trial.id, State.ACTIVE)
    config = experiment.config
    return ClusterInfo(
        task_type=TRIAL_TASK,
        trial=TrialInfo(trial.id, experiment.id, trial.seed, trial.hparams, config, run_id),
        latest_checkpoint=None if latest is None else latest.uuid,
        user_data=dict(config.get("data") or {}),
        store_path=str(store.path),
        checkpoint_dir=trial.checkpoint_dir,
        test_mode=experiment.test,
        pause_file=pause_file,
        trial_class=trial_class_of(experiment),
        slots=experiment.slots,
        container_addrs=container_addrs,
    )


def trial_class_of(experiment: ExperimentRecord) -> Optional[TrialClassSpec]:
    """How a worker imports the experiment's trial class; None for a script experiment."""
    if experiment.command is not None:
        return None
    if experiment.trial_class is not None:
        spec = experiment.trial_class
        return TrialClassSpec(spec["module"], spec["qualname"], spec.get("file"), tuple(spec.get("sys_path", ())))
    module, qualname = experiment.entrypoint.split(":")
    return TrialClassSpec(module, qualname, None, (experiment.context_dir,))


def end_run(
    store: ExperimentStore, info: ClusterInfo, failed: bool, exit_status: Optional[int] = None, stopped: bool = False
) -> State:
    """Records how a run ended: ERROR if it failed, PAUSED if it obeyed a pause (or was ``stopped``), else COMPLETED.

    A run that did not complete leaves its trial's progress at its latest checkpoint.
    """
    trial = info.require_trial()
    run_id = trial.run_id
    run = store.trial_run(run_id)
    if failed:
        state = State.ERROR
    elif run.preempted or stopped:
        state = State.PAUSED
    else:
        state = State.COMPLETED
    store.end_run(run_id, state, exit_status)
    store.set_trial_state(trial.trial_id, state)
    if state != State.COMPLETED:
        # What counts now is where a resume continues: batches trained since the last
        # checkpoint are lost with the run.
        trial_id = trial.trial_id
        kept = store.checkpoints(trial.experiment_id, trial_id=trial_id)
        store.set_progress(trial_id, max((checkpoint.batches for checkpoint in kept), default=0))
    return state


def checkpoint_storage_root(config: ExperimentConfig, context_dir: str) -> Path:
    """The config's checkpoint storage directory; a relative one is relative to the context directory."""
    root = Path(config.checkpoint_storage.checkpoint_directory)
    return root if root.is_absolute() else Path(context_dir) / root


def delete_checkpoints_not_kept(store: ExperimentStore, experiment_id: int) -> list[str]:
    """Applies ``checkpoint_storage``'s retention to a completed experiment; returns the uuids deleted.

    While trials train, each keeps its latest checkpoint whatever ``save_trial_latest``
    says, so that it can resume, and the checkpoints kept as the experiment's best stay
    when later trials do better. Once the experiment has completed, nothing resumes: as
    in the reference system, every trial then keeps just its ``save_trial_latest`` most
    recent and ``save_trial_best`` best checkpoints, and the experiment its
    ``save_experiment_best`` best over all trials (all three 0: none at all).
    """
    experiment = store.experiment(experiment_id)
    policy = load_experiment_config(experiment.config).checkpoint_storage
    metric = experiment.searcher_metric
    keep = set()
    if policy.save_experiment_best:
        keep = store.best_checkpoints(experiment_id, metric, experiment.smaller_is_better, policy.save_experiment_best)
    deleted: list[str] = []
    for trial in store.trials(experiment_id):
        if not Path(trial.checkpoint_dir).is_dir():
            continue
        checkpoints = TrialCheckpoints(trial.checkpoint_dir)
        gone = checkpoints.to_prune(
            save_latest=policy.save_trial_latest,
            save_best=policy.save_trial_best,
            metric=metric,
            smaller_is_better=experiment.smaller_is_better,
            keep=keep,
        )
        # Marked first: a store that cannot be written leaves the files, not a record of files that are gone.
        store.mark_checkpoints_deleted([checkpoint.uuid for checkpoint in gone])
        deleted.extend(checkpoint.uuid for checkpoint in gone)
        try:
            for checkpoint in gone:
                checkpoints.delete(checkpoint)
        except OSError as error:  # the experiment is done and recorded: a leftover checkpoint is no failure
            logger.warning("Checkpoints of trial %d that checkpoint_storage does not keep remain: %s", trial.id, error)
    return deleted

"""run_trial: the Python entry point that runs a trial class on one or several processes."""

import os
import sys
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

from det_estimator import _info, orchestration
from det_estimator.checkpoint import check_checkpoint_storage
from det_estimator.config import ExperimentConfig, load_experiment_config
from det_estimator.config._errors import describe
from det_estimator.errors import DetEstimatorError
from det_estimator.store import ExperimentStore, State

ConfigSource = Union[ExperimentConfig, Mapping[str, Any], str, os.PathLike]


class TrialFailedError(DetEstimatorError, RuntimeError):
    """A trial run on several processes failed; the failing process's traceback was printed."""


def run_trial(
    trial_class: type,
    config: ConfigSource,
    slots: Optional[int] = None,
    test: bool = False,
    trial_id: Optional[str] = None,
) -> orchestration.TrialOutcome:
    """Runs ``trial_class`` as the experiment config says, on ``slots`` processes.

    The run is recorded as an experiment in the default store (``DET_ESTIMATOR_STORE``,
    else ``~/.local/share/det-estimator/store.sqlite``), where the ``det-estimator``
    command shows it. A trial run again with the same ``trial_id`` and checkpoint
    storage resumes from its latest complete checkpoint (its length may have grown).
    SIGTERM or SIGINT pauses the trial: the current batch finishes, a checkpoint is
    written and the run returns with the state ``PAUSED``.

    Args:
        trial_class: the trial class (an ``EstimatorTrial`` or ``TFKerasTrial`` subclass), importable by
            module name, or defined in a script file.
        config: an ``ExperimentConfig``, a dict, or the path of a YAML file. The
            current directory is the run's context directory: a relative
            ``checkpoint_storage.host_path`` is relative to it.
        slots: processes to run (default: ``resources.slots_per_trial``); one runs in
            this process, more run under ``horovodrun --gloo`` on this machine (where
            Horovod is missing, a ``TFKerasTrial``'s under the TensorFlow launcher, with
            ``MultiWorkerMirroredStrategy``).
        test: one training batch, one validation step and one checkpoint, as a new
            experiment that resumes no earlier run and that no later run resumes.
        trial_id: the name under which the run is found again to resume (default: the
            config's ``name``, else the trial class's name).

    Returns:
        The ``TrialOutcome`` of this run: final state, batches trained, validations and
        checkpoints.

    Raises:
        ConfigError: the config is invalid.
        TrialFailedError: a worker process failed (its traceback was printed).
        ExperimentBusyError: another process is running the same trial right now.
    """
    _check_arguments(trial_class, trial_id)
    config = _with_slots(config if isinstance(config, ExperimentConfig) else load_experiment_config(config), slots)
    name = trial_id or config.name or trial_class.__name__
    context_dir = os.getcwd()
    root = orchestration.checkpoint_storage_root(config, context_dir).resolve()
    check_checkpoint_storage(root)
    spec = _info.TrialClassSpec.of(trial_class)
    with ExperimentStore() as store:
        experiment_id = orchestration.find_or_record_experiment(
            store, f"run_trial:{root / name}", config, context_dir, test=test, trial_class=spec, name=name
        )
        trial = store.trials(experiment_id)[0]
        if config.resources.slots_per_trial == 1:
            return _run_here(store, experiment_id, trial_class)
        state = orchestration.run_experiment(store, experiment_id, orchestration.PlainDisplay(), verbose=True)
        run = store.trial_runs(trial.id)[-1]
        if state == State.ERROR:
            orchestration.print_failure(store, experiment_id, sys.stderr)
            raise TrialFailedError(
                f"The trial failed: a worker exited with status {run.exit_status} (its traceback is above)."
            )
        return orchestration.trial_outcome(store, trial.id, run.id)


def _check_arguments(trial_class: Any, trial_id: Any) -> None:
    """Refuses a ``trial_class`` or ``trial_id`` of the wrong kind before anything is recorded, naming it."""
    from det_estimator.worker._run import is_trial_class, trial_kinds

    if not is_trial_class(trial_class):
        raise TypeError(
            f"run_trial(trial_class=...) takes a trial class: a subclass of one of {trial_kinds()} (the class "
            f"itself, not an instance or its name). Received: {describe(trial_class)}"
        )
    if trial_id is not None and not isinstance(trial_id, str):
        raise TypeError(f"run_trial(trial_id=...) takes a string or None. Received: {describe(trial_id)}")


def _run_here(store: ExperimentStore, experiment_id: int, trial_class: type) -> orchestration.TrialOutcome:
    """Runs the experiment's trial class in this process."""
    from det_estimator.worker import run_trial_class

    return run_in_this_process(store, experiment_id, lambda core_context: run_trial_class(trial_class, core_context))


def run_in_this_process(
    store: ExperimentStore, experiment_id: int, train: Callable[[Any], Any]
) -> orchestration.TrialOutcome:
    """Runs ``train(core_context)`` in this process as the run of the experiment's trial; returns its outcome.

    For the front ends that train where they are called (``run_trial`` on one slot,
    ``det.init(local=True)``): progress is shown as plain lines while it runs.
    """
    from det_estimator import core

    with (
        orchestration.in_process_run(store, experiment_id, orchestration.PlainDisplay()) as info,
        core.build_context(info, core.DummyDistributedContext(), store=store) as core_context,
    ):
        train(core_context)
    trial = info.require_trial()
    return orchestration.trial_outcome(store, trial.trial_id, trial.run_id)


def _with_slots(config: ExperimentConfig, slots: Optional[int]) -> ExperimentConfig:
    if slots is None or slots == config.resources.slots_per_trial:
        return config
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"Argument `slots` must be a positive integer. Received: slots={slots!r}")
    return config.with_overrides(slots=slots)

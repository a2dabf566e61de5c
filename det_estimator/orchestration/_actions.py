"""Pause and resume: the checks and requests every front end (the command, the web page) shares.

One mechanism per action: ``det-estimator experiment pause`` and the web page's pause
button both call :func:`request_pause`, and the page resumes an experiment by running
the command's own ``experiment resume`` (:func:`resume_command`), whose first check is
:func:`check_resumable`.
"""

import sys

from det_estimator.errors import DetEstimatorError
from det_estimator.store import ExperimentRecord, ExperimentStore, State, StoreLocation


class ActionRefusedError(DetEstimatorError):
    """The experiment is in no state for the action asked (pausing one that is not running, say)."""


def request_pause(store: ExperimentStore, experiment_id: int) -> ExperimentRecord:
    """Asks a running experiment to checkpoint and stop, through the store; returns it as it was asked.

    The request goes through the store, so it works from any machine that sees the
    store, whichever machine runs the experiment; the caller waits for the state to
    change if it wants to.

    Raises:
        ActionRefusedError: the experiment is not ACTIVE.
        UnknownIdError: there is no such experiment.
    """
    experiment = store.experiment(experiment_id)
    if experiment.state != State.ACTIVE:
        raise ActionRefusedError(f"Experiment {experiment_id} is {experiment.state}: only an ACTIVE one can be paused.")
    store.request_pause(experiment_id)
    return experiment


def check_resumable(experiment: ExperimentRecord, command: str = "det-estimator") -> None:
    """Refuses to resume an experiment that runs, has completed, or is a search whose every trial failed.

    Args:
        experiment: the experiment as the store shows it now.
        command: the command that reaches its store, for the message (see ``command_on``).

    Raises:
        ActionRefusedError: with what to do instead.
    """
    if experiment.state not in (State.PAUSED, State.INTERRUPTED, State.ERROR):
        hint = "it is running" if experiment.state == State.ACTIVE else "it has completed"
        if experiment.state == State.ACTIVE and experiment.launcher_pid is not None:
            hint += f" (process {experiment.launcher_pid} on {experiment.launcher_host})"
        raise ActionRefusedError(f"Experiment {experiment.id} is {experiment.state}: {hint}; nothing to resume.")
    searcher = experiment.config["searcher"]["name"]
    if experiment.state == State.ERROR and searcher != "single":
        raise ActionRefusedError(
            f"Experiment {experiment.id} is ERROR: every trial of its {searcher} search failed (see "
            f"`{command} experiment describe {experiment.id}`). Fix the cause and create a new experiment; a failed "
            "single-trial experiment can be resumed from its latest checkpoint."
        )


def resume_command(store: StoreLocation, experiment_id: int) -> list[str]:
    """The command line that resumes the experiment in a process of its own: ``det-estimator experiment resume``.

    Run with this interpreter, so that it is the same installation as the caller's. A
    database's URL is given without its password, which the process list would show: run
    it with the store's :meth:`~det_estimator.store.StoreLocation.environment`.
    """
    return [
        sys.executable,
        "-c",
        "import sys; from det_estimator.cli import main; sys.exit(main())",
        "--store",
        store.without_password,
        "experiment",
        "resume",
        str(experiment_id),
    ]

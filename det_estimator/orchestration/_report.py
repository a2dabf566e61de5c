"""Running an experiment for a person at a terminal (or a script reading JSON), and telling how it ended."""

import json
import os
import shlex
import sys
from typing import Any, Optional, TextIO

from det_estimator.config import ExperimentConfig
from det_estimator.orchestration._display import OutputStream, display_for
from det_estimator.orchestration._experiment import run_experiment
from det_estimator.orchestration._outcome import ExperimentSummary, summarize
from det_estimator.orchestration._restarts import CONFIG_ERRORS, numbers_aside
from det_estimator.store import (
    ExperimentStore,
    LogOwner,
    State,
    StoreLocation,
    TrialRecord,
    default_store_path,
    to_json_value,
)

# A number in an error's text: a search's trials differ in their hyperparameters, which an
# error often quotes (a learning rate, a layer's shape), so errors are alike without them.


def run_and_report(
    store: ExperimentStore,
    experiment_id: int,
    json_output: bool = False,
    verbose: bool = False,
    stdout: Optional[TextIO] = None,
    stderr: Optional[TextIO] = None,
    config: Optional[ExperimentConfig] = None,
) -> int:
    """Runs the experiment with a live display, then prints its summary or its error.

    ``config`` is the experiment's config when the caller has it (see :func:`run_experiment`).

    Progress goes to standard output (to standard error with ``json_output``, where
    standard output gets the summary as JSON, a failed experiment's included).

    Returns:
        The exit status for a command: 0 when the experiment completed or paused; 1
        when it failed, or every one of its trials failed (a script that raised after
        reporting its training complete, say); 2 when it failed because its config does
        not fit its code (see :func:`failed_for_its_config`): bad input, as a config
        refused before training.
    """
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    shown = _UntilTheReaderLeaves(stderr if json_output else stdout)
    display = display_for(shown, multi_trial=store.experiment(experiment_id).is_search)
    try:
        state = run_experiment(store, experiment_id, display, verbose, config)
    finally:
        display.close()
    if state == State.ERROR:
        print_failure(store, experiment_id, stderr)
        if json_output:  # a script reading stdout learns the id and the state of a failure too
            print_json(summary_as_json(summarize(store, experiment_id)), stdout)
        return 2 if failed_for_its_config(store, experiment_id) else 1
    summary = summarize(store, experiment_id)
    if json_output:
        print_json(summary_as_json(summary), stdout)
    else:
        print_summary(summary, shown, command_on(store.location))
    failed = [trial for trial in summary.trials if trial.state == State.ERROR]
    print_trial_failures(store, failed, stderr)
    stderr.flush()
    return 1 if summary.trials and len(failed) == len(summary.trials) else 0


class _UntilTheReaderLeaves:
    """A text stream that goes quiet, rather than raising, once the reader of its pipe is gone.

    The reader can die with the very Ctrl-C that pauses the experiment (``det-estimator
    ... | tee log``, where the terminal signals both): the pause, and every trial's
    checkpoint, must not fail for want of a place to print. From then on what is written
    goes to the null device, Python's own flush at exit included.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def _silence(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)  # encoding and the like: the stream's own


def print_json(value: Any, stream: TextIO) -> None:
    """Pretty JSON: NaN and infinities as ``null`` (JSON has neither), enums as their names."""
    json.dump(to_json_value(value), stream, indent=2, sort_keys=True, allow_nan=False, default=str)
    stream.write("\n")


def summary_as_json(summary: ExperimentSummary) -> dict[str, Any]:
    """The summary's fields for ``--json``."""
    experiment = summary.experiment
    return {
        "id": experiment.id,
        "state": experiment.state,
        "batches_trained": experiment.batches_trained,
        "max_batches": experiment.max_batches,
        "best_validation": summary.best_validation,
        "checkpoints": [
            {**to_json_value(checkpoint), "saved_models": summary.saved_models.get(checkpoint.uuid, {})}
            for checkpoint in summary.checkpoints
        ],
    }


def command_on(store: StoreLocation) -> str:
    """The shell command that reaches this store: ``det-estimator``, with ``--store`` unless it is the default one.

    The commands a summary suggests must work when pasted into the same shell, so they
    name a store that ``det-estimator`` alone would not find.
    """
    if store.path is not None and store.path.resolve() == default_store_path().resolve():
        return "det-estimator"
    # A database's URL without its password, which the shell's PGPASSWORD or ~/.pgpass gives.
    return f"det-estimator --store {shlex.quote(store.without_password)}"


def print_summary(summary: ExperimentSummary, stream: OutputStream, command: str = "det-estimator") -> None:
    """The end of a run, for people: state, best validation, kept checkpoints and their SavedModels.

    ``command`` starts the commands it suggests (see :func:`command_on`).
    """
    experiment, best = summary.experiment, summary.best_validation
    lines = [f"\nExperiment {experiment.id} {experiment.state} after {experiment.batches_trained} batches."]
    if best is not None:
        # Of a search: which trial's, as `experiment describe` says.
        of_trial = f" (trial {best.trial_id})" if len(summary.trials) > 1 else ""
        lines.append(f"Best validation: {best.metric} {best.value:.6g} after {best.batches} batches{of_trial}.")
    shown = summary.checkpoints
    if len(summary.trials) > 1:
        best_trial = None if best is None else best.trial_id
        shown = [checkpoint for checkpoint in summary.checkpoints if checkpoint.trial_id == best_trial]
        # Before any validation (a search paused at its start) there is no best trial to show.
        lines.append(
            f"Trials: {len(summary.trials)}; `{command} trial list {experiment.id}` ranks them. "
            f"Checkpoints kept: {len(summary.checkpoints)} (`{command} checkpoint list {experiment.id}`)"
            + ("; the best trial's:" if shown else ".")
        )
    else:
        lines.append(f"Checkpoints kept ({len(summary.checkpoints)}):")
    for checkpoint in shown:
        lines.append(f"  {checkpoint.uuid}  batches {checkpoint.batches}  {checkpoint.path}")
        for name, path in summary.saved_models.get(checkpoint.uuid, {}).items():
            lines.append(f"    SavedModel {name!r}: {path}")
    for trial in summary.trials:
        # A trial can fail after the search had what it needed: a script that raised
        # after reporting its training complete. Its checkpoints stand; its failure is shown.
        if trial.state == State.ERROR:
            lines.append(
                f"Trial {trial.id} failed: `{command} trial describe {trial.id}` says why, "
                f"`{command} trial logs {trial.id}` has its output."
            )
    if experiment.state == State.PAUSED:
        lines.append(f"Resume with: {command} experiment resume {experiment.id}")
    stream.write("\n".join(lines) + "\n")
    stream.flush()


def failed_for_its_config(store: ExperimentStore, experiment_id: int) -> bool:
    """Whether every failed trial of the experiment failed with an error that blames the config.

    Such an error (a hyperparameter the code asks for that the config lacks, a searcher
    metric that no validation reports) surfaces only once the code runs, but a run again
    would fail the same way until the config is fixed.
    """
    errors = [error for _, error in _last_run_errors(store, store.trials(experiment_id))]
    return bool(errors) and all(error.get("type") in CONFIG_ERRORS for error in errors)


def _last_run_errors(store: ExperimentStore, trials: list[TrialRecord]) -> list[tuple[TrialRecord, dict[str, Any]]]:
    """Each of ``trials`` whose last run failed, with that run's error."""
    failed = []
    for trial in trials:
        runs = store.trial_runs(trial.id)
        if runs and runs[-1].error is not None:
            failed.append((trial, runs[-1].error))
    return failed


def failure_place_and_text(error: dict[str, Any]) -> tuple[str, str]:
    """`` on rank 1 in metric 'auc'`` and the cause's traceback (or message) of a recorded run error, as shown."""
    where = "" if error.get("rank") is None else f" on rank {error['rank']}"
    origin = f" in {error['origin']}" if error.get("origin") else ""
    return f"{where}{origin}", (error.get("traceback") or error.get("message") or "").rstrip()


def print_trial_failures(store: ExperimentStore, trials: list[TrialRecord], stream: TextIO) -> list[TrialRecord]:
    """The cause of each of ``trials`` whose last run failed, once; returns those trials.

    Trials that failed alike (the same rank, origin and error, but for the numbers in it:
    a search whose code or config fails every trial the same way) share one report that
    names them all, rather than repeating it for each.
    """
    failed = _last_run_errors(store, trials)
    causes: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for trial, error in failed:
        place, text = failure_place_and_text(error)
        causes.setdefault((place, numbers_aside(text)), []).append((trial.id, text))
    for (place, _), alike in causes.items():
        (first_id, text), trial_ids = alike[0], [trial_id for trial_id, _ in alike]
        named = f"Trial {first_id}" if len(alike) == 1 else f"Trials {', '.join(map(str, trial_ids))}"
        if any(other != text for _, other in alike):
            place += f" (trial {first_id}'s error below; the others' differ only in numbers)"
        stream.write(f"{named} failed{place}:\n{text}\n\n")
    return [trial for trial, _ in failed]


def print_failure(store: ExperimentStore, experiment_id: int, stream: TextIO) -> None:
    """The cause of a failed run, once: the failing rank, what raised it, the user's exception and frames.

    The whole output of every process, with the full tracebacks, is in the trial's log,
    which the last lines name.
    """
    experiment = store.experiment(experiment_id)
    trials = store.trials(experiment_id)
    failed = print_trial_failures(store, trials, stream)
    command = command_on(store.location)
    logged = failed or trials[:1]
    stream.write(f"Experiment {experiment_id} failed ({experiment.state}).")
    if len(logged) == 1:
        (trial,) = logged
        where = store.log_location(LogOwner.trial(trial.id))
        stream.write(f" The whole output of trial {trial.id}: {command} trial logs {trial.id}  ({where})\n")
    else:
        # A search's trials: one line each, not one line as long as all of them.
        stream.write(" The whole output of each trial:\n")
        for trial in logged:
            where = store.log_location(LogOwner.trial(trial.id))
            stream.write(f"  trial {trial.id}: {command} trial logs {trial.id}  ({where})\n")
    stream.flush()

"""Orchestration: record an experiment, run its trial, follow it, record how it ended.

The one layer between the front ends (the ``det-estimator`` command, ``run_trial``,
``det.init()``) and the launcher. It imports no TensorFlow: a trial runs either in
processes the launcher starts (``python -m det_estimator.worker``, or the user's
script), or in the caller's own process, inside :func:`in_process_run`.
"""

from det_estimator.orchestration._actions import ActionRefusedError, check_resumable, request_pause, resume_command
from det_estimator.orchestration._display import (
    BarDisplay,
    Display,
    PlainDisplay,
    display_for,
    format_metrics,
    format_size,
    format_value,
)
from det_estimator.orchestration._experiment import (
    LauncherReplacedError,
    find_or_record_experiment,
    in_process_run,
    record_experiment,
    run_experiment,
)
from det_estimator.orchestration._follow import (
    CheckpointSaved,
    Event,
    MetricsReported,
    Progress,
    StoreFollower,
    TrialEnded,
    TrialStarted,
)
from det_estimator.orchestration._outcome import ExperimentSummary, TrialOutcome, summarize, trial_outcome
from det_estimator.orchestration._processes import first_traceback
from det_estimator.orchestration._report import (
    command_on,
    print_failure,
    print_json,
    print_summary,
    run_and_report,
    summary_as_json,
)
from det_estimator.orchestration._runs import checkpoint_storage_root
from det_estimator.orchestration._search import saved_method_state

__all__ = [
    "ActionRefusedError",
    "LauncherReplacedError",
    "BarDisplay",
    "CheckpointSaved",
    "Display",
    "Event",
    "ExperimentSummary",
    "MetricsReported",
    "PlainDisplay",
    "Progress",
    "StoreFollower",
    "TrialEnded",
    "TrialOutcome",
    "TrialStarted",
    "check_resumable",
    "checkpoint_storage_root",
    "command_on",
    "display_for",
    "find_or_record_experiment",
    "first_traceback",
    "format_metrics",
    "format_size",
    "format_value",
    "in_process_run",
    "print_failure",
    "print_json",
    "print_summary",
    "record_experiment",
    "request_pause",
    "resume_command",
    "run_and_report",
    "run_experiment",
    "saved_method_state",
    "summarize",
    "summary_as_json",
    "trial_outcome",
]

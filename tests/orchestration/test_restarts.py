"""Restarts only where a restart can help: the rule, on recorded runs."""

import pytest

from det_estimator.lifecycle import ErrorKind, RunError
from det_estimator.orchestration._restarts import Failure, resumes_from, why_not_restart
from det_estimator.store import CheckpointRecord, State, TrialRunRecord


def traceback_at(line: int) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 10, in <module>\n    main()\n'
        f'  File "/work/model.py", line {line}, in step\n    raise RuntimeError(...)\n'
    )


def raised(type_name: str = "RuntimeError", message: str = "batch 7 failed", line: int = 42, **extra) -> dict:
    error = RunError(ErrorKind.RAISED, message, rank=0, type=type_name, traceback=traceback_at(line), **extra)
    return error.to_record()


def run(run_id: int, error) -> TrialRunRecord:
    return TrialRunRecord(run_id, 1, 0.0, 1.0, State.ERROR, False, 1, error)


def test_a_first_failure_while_training_is_restarted():
    assert why_not_restart(Failure(run(1, raised()), trained=True)) is None


def test_a_failure_before_the_first_batch_is_not():
    assert "before completing a batch" in why_not_restart(Failure(run(1, raised()), trained=False))
    # A killed process records no exception: the same rule.
    assert "before completing a batch" in why_not_restart(Failure(run(1, None), trained=False))


@pytest.mark.parametrize(
    ("previous", "repeats"),
    [
        (raised(), True),
        (raised(message="batch 12 failed"), True),  # numbers aside, the same message
        (raised(message="batch 7 broke"), False),
        (raised(type_name="ValueError"), False),
        (raised(line=43), False),  # raised elsewhere
        (None, False),  # a killed process: nothing to compare
    ],
)
def test_the_same_error_at_the_same_place_as_the_run_before_is_not_restarted(previous, repeats):
    failure = Failure(run(2, raised()), trained=True, previous=run(1, previous))
    reason = why_not_restart(failure)
    assert (reason == "it failed as its previous run did, with the same error at the same place") is repeats


def test_errors_without_a_type_never_count_as_repeated():
    exited = RunError(ErrorKind.EXITED, "the processes exited with 137").to_record()
    assert why_not_restart(Failure(run(2, exited), trained=True, previous=run(1, exited))) is None


def test_config_and_code_errors_are_not_restarted_even_after_training():
    config = raised(type_name="SearcherMetricError", message="searcher.metric 'lss' is not among the metrics")
    assert "experiment config is at fault" in why_not_restart(Failure(run(1, config), trained=True))
    code = raised(permanent=True)
    assert "trial's code is at fault" in why_not_restart(Failure(run(1, code), trained=True))


def test_the_restart_line_says_where_the_trial_goes_on_from():
    assert resumes_from(None) == "from the start (it has no checkpoint yet)"
    checkpoint = CheckpointRecord(
        uuid="c0ffee",
        trial_id=1,
        batches=40,
        state="COMPLETED",
        validation_metrics=None,
        size_bytes=1,
        path="/x",
        created_at=0.0,
    )
    assert resumes_from(checkpoint) == "from checkpoint c0ffee after 40 batches"

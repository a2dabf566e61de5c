"""What a restart records as its cause: the failing rank's error line, or the rank that was killed."""

import pytest

from det_estimator.orchestration._processes import first_failed_process, record_failure_from_log, restart_cause
from det_estimator.store import ExperimentStore, State, TrialRunRecord


def run(error=None, exit_status=1) -> TrialRunRecord:
    return TrialRunRecord(1, 1, 0.0, 1.0, State.ERROR, False, exit_status, error)


HOROVOD_END = [
    "[0]<stderr>:tensorflow.python.framework.errors_impl.UnknownError: Graph execution error:",
    "Process 1 exit with status code 137.",
    "Terminating remaining workers after failure of Process 1.",
    "Process 0 exit with status code 143.",
    "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job "
    "to be terminated. The first process to do so was:",
    "Process name: 1",
    "Exit code: 137",
]


def test_the_process_horovodrun_names_first_is_the_failed_one():
    assert first_failed_process(HOROVOD_END) == (1, 137)
    assert first_failed_process(["Process 0 exit with status code -9."]) == (0, -9)
    assert first_failed_process(["all is well"]) is None


def test_a_killed_rank_is_the_cause_rather_than_what_its_peer_recorded():
    peer = {"rank": 0, "type": "UnknownError", "message": "Graph execution error:\n...", "traceback": ""}
    assert restart_cause(run(peer), (1, 137)) == "rank 1: the process exited with status 137 (killed by SIGKILL)"
    assert restart_cause(run(peer), (1, -9)) == "rank 1: the process exited with status -9 (killed by SIGKILL)"


def test_a_rank_that_raised_is_the_cause_with_its_error_line():
    error = {"rank": 1, "type": "RuntimeError", "message": "injected failure\nmore lines", "traceback": "..."}
    assert restart_cause(run(error), (1, 1)) == "rank 1: RuntimeError: injected failure"
    assert restart_cause(run(error)) == "rank 1: RuntimeError: injected failure"


def test_a_failure_without_a_recorded_error_still_has_a_cause():
    assert restart_cause(run(None, 3)) == "the processes exited with 3"
    assert restart_cause(run({"rank": None, "type": None, "message": "Killed", "traceback": ""})) == "Killed"


@pytest.mark.parametrize(
    ("lines", "status", "message"),
    [
        # One slot: the trial's own process was killed after a warning; the signal is the cause.
        (
            ["WARNING:tensorflow:Export includes no default signature!"],
            -9,
            "the process exited with status -9 (killed by SIGKILL)",
        ),
        (
            ["WARNING:tensorflow:Export includes no default signature!"],
            137,
            "the process exited with status 137 (killed by SIGKILL)",
        ),
        # Several slots: the first process horovodrun saw exit, whatever ended horovodrun.
        (HOROVOD_END[1:3], 1, "the process exited with status 137 (killed by SIGKILL)"),
        # horovodrun's own traceback, which ends the output of a job whose rank 1 was killed,
        # says nothing of its own: the killed rank is the cause.
        (
            HOROVOD_END[1:4] + ["Traceback (most recent call last):", '  File "horovodrun", line 8'] + HOROVOD_END[4:],
            1,
            "the process exited with status 137 (killed by SIGKILL)",
        ),
        # horovodrun could not ssh into a host: its traceback names none, its lines before do.
        (
            [
                "ssh not successful for host gone:",
                "ssh: connect to host gone port 22: No route to host",
                "",
                "Traceback (most recent call last):",
                '  File "horovodrun", line 8, in <module>',
                "RuntimeError: could not connect to some hosts via ssh",
            ],
            1,
            "horovodrun could not reach gone over ssh (ssh: connect to host gone port 22: No route to host)",
        ),
        # An exit status of its own, without a traceback: the last line it printed says most.
        (["loading", "out of disk space"], 3, "out of disk space"),
        ([], 3, "the process exited with status 3, without output"),
    ],
)
def test_a_failure_without_a_traceback_is_recorded_with_its_likeliest_cause(tmp_path, lines, status, message):
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = store.create_experiment("e", {}, "/context", "model_def:Trial", 1, False)
        run_id = store.start_run(store.create_trial(experiment_id, {}, 0, "/checkpoints"))
        record_failure_from_log(store, run_id, lines, status)
        error = store.trial_run(run_id).error
        assert error["message"] == message
        assert error["rank"] == (1 if HOROVOD_END[1] in lines else None)


def test_a_killed_rank_replaces_what_its_peer_recorded_on_losing_it_as_the_runs_error(tmp_path):
    peer = {"rank": 0, "type": "UnknownError", "message": "Horovod has been shut down.", "traceback": "..."}
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = store.create_experiment("e", {}, "/context", "model_def:Trial", 2, False)
        trial_id = store.create_trial(experiment_id, {}, 0, "/checkpoints")
        consequence, own = store.start_run(trial_id), store.start_run(trial_id)
        store.record_run_error(consequence, {**peer, "consequence": True})
        store.record_run_error(own, peer)  # rank 0 failed on its own: it stays the cause
        for run_id in (consequence, own):
            record_failure_from_log(store, run_id, HOROVOD_END, 1)

        error = store.trial_run(consequence).error
        assert (error["rank"], error["message"]) == (1, "the process exited with status 137 (killed by SIGKILL)")
        assert store.trial_run(own).error == peer

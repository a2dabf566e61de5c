"""The hang watch's decisions, on a fake clock and fake progress counts; a process's heartbeat, in this process."""

import json
import os
import threading

import pytest

from det_estimator import _heartbeat
from det_estimator.lifecycle import ErrorKind
from det_estimator.orchestration._hangs import (
    DUMP_WAIT_SECONDS,
    SIGNAL_AFTER_SECONDS,
    HangState,
    HangWatch,
    hang_error,
)
from det_estimator.orchestration._restarts import Failure, why_not_restart
from det_estimator.store import State, TrialRunRecord


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch(timeout: float = 60, slots: int = 2) -> tuple[HangWatch, FakeClock]:
    clock = FakeClock()
    return HangWatch(timeout, slots, clock), clock


def test_no_progress_before_the_first_is_not_a_hang():
    hang, clock = watch()
    for _ in range(10):
        clock.now += 3600
        assert hang.observe({}) == HangState.WATCHING
    assert hang.silent_seconds == 0


def test_progress_on_any_rank_restarts_the_clock():
    hang, clock = watch(timeout=60)
    hang.observe({0: 1, 1: 1})
    for step in range(2, 10):
        clock.now += 59
        # Only rank 1 moves (rank 0 may be the one in a long validation step): not a hang.
        assert hang.observe({0: 1, 1: step}) == HangState.WATCHING
    clock.now += 59
    assert hang.observe({0: 1, 1: 9}) == HangState.WATCHING
    clock.now += 1
    assert hang.observe({0: 1, 1: 9}) == HangState.DUMPING
    assert hang.silent_seconds == 60


def test_a_hung_run_ends_once_every_rank_answered():
    hang, clock = watch(timeout=10, slots=2)
    hang.observe({0: 5, 1: 5})
    clock.now += 10
    assert hang.observe({0: 5, 1: 5}) == HangState.DUMPING
    clock.now += 1
    assert hang.observe({0: 5, 1: 5}, answered=1) == HangState.DUMPING
    assert hang.observe({0: 5, 1: 5}, answered=2) == HangState.HUNG
    assert hang.silent_seconds == 10  # up to the request, not counting the wait for the answers


def test_a_hung_run_ends_after_the_wait_even_if_a_rank_never_answers():
    hang, clock = watch(timeout=10, slots=2)
    hang.observe({0: 5, 1: 5})
    clock.now += 10
    hang.observe({0: 5, 1: 5})
    clock.now += DUMP_WAIT_SECONDS - 0.5
    assert hang.observe({0: 5, 1: 5}, answered=1) == HangState.DUMPING
    clock.now += 0.5
    assert hang.observe({0: 5, 1: 5}, answered=1) == HangState.HUNG


def test_the_silent_ranks_are_signalled_once_a_little_after_the_request():
    hang, clock = watch(timeout=10, slots=2)
    hang.observe({0: 5, 1: 5})
    assert not hang.signal_due()  # no hang yet
    clock.now += 10
    hang.observe({0: 5, 1: 5})
    clock.now += SIGNAL_AFTER_SECONDS - 0.5
    hang.observe({0: 5, 1: 5}, answered=1)
    assert not hang.signal_due()
    clock.now += 0.5
    hang.observe({0: 5, 1: 5}, answered=1)
    assert hang.signal_due()
    assert not hang.signal_due()  # once


def test_progress_after_the_dump_request_does_not_take_it_back():
    hang, clock = watch(timeout=10, slots=1)
    hang.observe({0: 1})
    clock.now += 10
    assert hang.observe({0: 1}) == HangState.DUMPING
    assert hang.observe({0: 2}, answered=1) == HangState.HUNG


def test_a_timeout_of_0_never_finds_a_hang():
    hang, clock = watch(timeout=0)
    hang.observe({0: 1, 1: 1})
    clock.now += 10**9
    assert hang.observe({0: 1, 1: 1}) == HangState.WATCHING


def place(rank: int, line: int, users: bool = True) -> _heartbeat.StuckPlace:
    return _heartbeat.StuckPlace(rank, f"/code/rank{rank}.py", line, "step", users, "MainThread")


def test_the_hang_error_names_where_each_rank_is_and_which_did_not_answer():
    error = hang_error(61.4, 3, {0: place(0, 12), 1: place(1, 40, users=False)})
    assert error.kind == ErrorKind.HANG and error.type == "Hang"
    assert "for 61 s" in error.message
    assert "rank 0 in step (/code/rank0.py:12)" in error.message
    assert "rank 1 in det-estimator's step (/code/rank1.py:40)" in error.message
    assert "rank 2 did not answer" in error.message
    assert "hang_timeout_seconds" in error.message
    assert '  File "/code/rank1.py", line 40, in step' in error.traceback


def failed_run(run_id: int, error) -> TrialRunRecord:
    return TrialRunRecord(
        id=run_id,
        trial_id=1,
        started_at=0.0,
        ended_at=1.0,
        state=State.ERROR,
        preempted=False,
        exit_status=1,
        error=error.to_record(),
    )


def test_a_hang_is_restarted_and_the_same_hang_again_is_not():
    first = failed_run(1, hang_error(60, 2, {0: place(0, 12), 1: place(1, 40)}))
    assert why_not_restart(Failure(first, trained=True)) is None
    again = failed_run(2, hang_error(75, 2, {0: place(0, 12), 1: place(1, 40)}))
    refusal = why_not_restart(Failure(again, trained=True, previous=first))
    assert refusal is not None and "same error at the same place" in refusal
    elsewhere = failed_run(2, hang_error(60, 2, {0: place(0, 12), 1: place(1, 41)}))
    assert why_not_restart(Failure(elsewhere, trained=True, previous=first)) is None


def test_a_process_writes_its_progress_and_dumps_its_stacks_when_asked(tmp_path, capfd):
    writer = _heartbeat.HeartbeatWriter(tmp_path, rank=3)
    before = _heartbeat.beats()
    _heartbeat.beat()
    writer.tick()
    assert _heartbeat.read_beats(tmp_path) == {3: before + 1}
    record = json.loads(_heartbeat.heartbeat_path(tmp_path, 3).read_text())
    assert record["rank"] == 3 and record["pid"] > 0

    waiting, entered = threading.Event(), threading.Event()

    def wedged_in_user_code() -> None:
        entered.set()
        waiting.wait(30)  # stuck here

    thread = threading.Thread(target=wedged_in_user_code, name="wedged")
    thread.start()
    entered.wait(10)
    try:
        assert _heartbeat.read_stuck(tmp_path) == {}
        (tmp_path / _heartbeat.DUMP_REQUEST).touch()
        writer.tick()
    finally:
        waiting.set()
        thread.join()
    (stuck,) = _heartbeat.read_stuck(tmp_path).values()
    # The thread that answers (here the main one) is left out: the wedged thread is where this process is stuck.
    assert stuck is not None and stuck.users and stuck.rank == 3
    assert stuck.file == __file__ and stuck.thread == "wedged" and stuck.function == "wedged_in_user_code"
    err = capfd.readouterr().err
    assert "Python stacks of rank 3 (most recent call first):" in err
    assert "in wedged_in_user_code" in err  # faulthandler's dump of every thread


def test_the_stuck_place_is_the_users_innermost_frame_in_another_thread_when_the_main_thread_has_none():
    waiting, entered = threading.Event(), threading.Event()

    def wedged_in_user_code() -> None:
        entered.set()
        waiting.wait(30)  # stuck here

    thread = threading.Thread(target=wedged_in_user_code, name="wedged")
    thread.start()
    entered.wait(10)
    try:
        frames = {ident: frame for ident, frame in _current_frames().items() if ident == thread.ident}
        stuck = _heartbeat.stuck_place(0, frames, threading.get_ident())
    finally:
        waiting.set()
        thread.join()
    assert stuck is not None and stuck.function == "wedged_in_user_code" and stuck.thread == "wedged"
    assert stuck.line == _line_of("waiting.wait(30)  # stuck here", after=stuck.line - 5)


def _current_frames() -> dict:
    import sys

    return sys._current_frames()


def _line_of(text: str, after: int) -> int:
    with open(__file__, encoding="utf-8") as source:
        lines = source.read().splitlines()
    return next(number for number, line in enumerate(lines, 1) if number > after and text in line)


@pytest.mark.parametrize("value", [-1, 1.5, "ten", True])
def test_a_bad_hang_timeout_is_refused(value):
    from det_estimator.config import ConfigError, load_experiment_config

    raw = {
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "hang_timeout_seconds": value,
    }
    with pytest.raises(ConfigError, match="hang_timeout_seconds"):
        load_experiment_config(raw)


def test_files_of_another_format_in_the_runs_folder_are_no_progress_and_no_answer(tmp_path):
    _heartbeat.heartbeat_path(tmp_path, 0).write_text(json.dumps({"rank": 0, "count": 3}))
    _heartbeat.heartbeat_path(tmp_path, 1).write_text("{not json")
    _heartbeat.stuck_path(tmp_path, 0).write_text(json.dumps({"rank": 0, "place": {"file": "x"}}))
    assert _heartbeat.read_beats(tmp_path) == {}
    assert _heartbeat.read_stuck(tmp_path) == {}


def test_a_process_is_known_by_its_pid_from_the_start_before_any_tick(tmp_path):
    # A process that takes the interpreter lock for good before its watcher thread's first
    # tick can only be signalled for its stacks if its pid was written when it started.
    _heartbeat.HeartbeatWriter(tmp_path, rank=1)
    (found,) = _heartbeat.read_heartbeats(tmp_path).values()
    assert found.rank == 1 and found.pid == os.getpid() and found.beats == _heartbeat.beats()

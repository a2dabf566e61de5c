"""The root cause of a failure: the user's exception and frames, what raised it, and which error wins in the store."""

import copy

import pytest

from det_estimator import _root_cause
from det_estimator._root_cause import error_record
from det_estimator.reducers._accumulator import MetricAccumulator, MetricReductionError
from det_estimator.store import ExperimentStore


class OutOfRangeError(Exception):
    """Stands for TensorFlow's end-of-input error (matched by name)."""


class UserHook:
    def end(self):
        # Called by library code, as TensorFlow calls a hook: copy.copy calls __copy__.
        copy.copy(self)

    def __copy__(self):
        self.helper()

    def helper(self):
        raise ValueError("the hook cannot finish")


@pytest.fixture(autouse=True)
def no_noted_cause():
    _root_cause.forget()
    yield
    _root_cause.forget()


def raised(function):
    try:
        function()
    except BaseException as error:  # noqa: BLE001 -- the tests look at any exception
        return error
    raise AssertionError("expected an exception")


def test_the_user_frame_and_its_object_name_the_origin():
    error = raised(UserHook().end)
    cause = _root_cause.root_cause(error, rank=1)
    assert (cause.rank, cause.type, cause.message) == (1, "ValueError", "the hook cannot finish")
    assert cause.origin == "UserHook.__copy__"  # where library code called the user's code last
    assert cause.traceback.startswith("Traceback (most recent call last):\n")
    assert "test_root_cause.py" in cause.traceback and cause.traceback.rstrip().endswith("the hook cannot finish")


def test_the_end_of_an_input_chained_before_the_error_is_left_out():
    def evaluate():
        try:
            raise OutOfRangeError("End of sequence")
        except OutOfRangeError:
            UserHook().end()

    cause = _root_cause.root_cause(raised(evaluate), rank=0)
    assert "End of sequence" not in cause.traceback and "During handling" not in cause.traceback
    assert cause.traceback.rstrip().endswith("ValueError: the hook cannot finish")


def test_other_chained_errors_are_kept():
    def convert():
        try:
            {}["missing"]
        except KeyError as error:
            raise RuntimeError("no such key") from error

    cause = _root_cause.root_cause(raised(convert), rank=0)
    assert "KeyError: 'missing'" in cause.traceback and "RuntimeError: no such key" in cause.traceback


def test_frames_before_the_first_user_frame_are_dropped():
    import json

    class Weird:
        pass

    # json.dumps raises inside the standard library, called from here: the shown frames start here.
    cause = _root_cause.root_cause(raised(lambda: json.dumps(Weird())), rank=0)
    frames = [line for line in cause.traceback.splitlines() if line.startswith("  File ")]
    assert "test_root_cause.py" in frames[0]


def test_a_reducer_failure_reaches_every_rank_as_its_root_cause():
    class Broken:
        def accumulate(self, batch):
            raise ValueError(f"bad batch {batch}")

        def cross_slot_reduce(self, states):
            return sum(states)

    failing = MetricAccumulator(Broken(), name="auc", rank=1)
    failing.accumulate(7)
    healthy = MetricAccumulator(Broken(), name="auc", rank=0)
    # Rank 0 gets rank 1's envelope, as through the allgather.
    with pytest.raises(
        MetricReductionError, match=r"(?s)Metric 'auc': the reducer Broken failed in accumulate on rank 1"
    ):
        healthy.reduce([("no-batch", None), failing.local_envelope()])
    # Whatever the failure then ends (TensorFlow's wrapper of the py_func), the noted cause is recorded.
    record = error_record(RuntimeError("Graph execution error: ... (a long TensorFlow message)"), rank=0)
    assert (record["rank"], record["type"], record["message"]) == (1, "ValueError", "bad batch 7")
    assert record["origin"] == "metric 'auc' (Broken.accumulate)"
    assert "raise ValueError" in record["traceback"]


def test_a_peer_gone_error_gives_way_to_the_cause_in_the_store(tmp_path):
    class PeerGoneError(Exception):
        pass

    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = store.create_experiment("e", {}, str(tmp_path), "m:C", slots=2, test=False)
        trial_id = store.create_trial(experiment_id, {}, seed=1, checkpoint_storage=tmp_path)
        run_id = store.start_run(trial_id)
        consequence = error_record(PeerGoneError("rank 1 is gone"), rank=0)
        assert consequence["consequence"]
        store.record_run_error(run_id, consequence)
        cause = error_record(raised(UserHook().end), rank=1)
        store.record_run_error(run_id, cause)
        store.record_run_error(run_id, error_record(PeerGoneError("later"), rank=0))
        store.record_run_error(run_id, error_record(RuntimeError("a later, unrelated error"), rank=0))
        assert store.trial_run(run_id).error["message"] == "the hook cannot finish"


def test_det_estimators_own_error_is_shown_as_its_message_alone():
    from det_estimator.config import load_experiment_config

    cause = _root_cause.root_cause(raised(lambda: load_experiment_config({"name": 3})), rank=0)
    assert cause.type == "ConfigError" and cause.traceback == f"ConfigError: {cause.message}"
    assert "det_estimator" not in cause.traceback

"""The search runner and the slot pool, without processes: steps recorded in the store, slots shared out."""

import pytest

import det_estimator as det
from det_estimator.config import load_experiment_config
from det_estimator.launcher import parse_hosts
from det_estimator.orchestration import record_experiment
from det_estimator.orchestration._processes import Allocation, SlotPool
from det_estimator.orchestration._search import SearchRunner
from det_estimator.store import ExperimentStore, MetricKind, SearchState, State


def test_slots_on_this_machine_are_shared_out_and_given_back():
    pool = SlotPool(3)
    first = pool.allocate(2)
    assert first == Allocation(2) and pool.allocate(2) is None and pool.total == 1
    pool.release(first)
    assert pool.total == 3


def on(hosts):
    """An allocation's hosts, written as --hosts text."""
    return tuple(parse_hosts(hosts))


def test_slots_on_hosts_go_to_one_host_when_it_has_room_else_span_hosts():
    pool = SlotPool(0, parse_hosts("a:2,b:2"))
    assert pool.allocate(2) == Allocation(2, on("a:2"))
    assert pool.allocate(1) == Allocation(1, on("b:1"))
    assert pool.allocate(2) is None
    pool.release(Allocation(2, on("a:2")))
    assert pool.allocate(3) == Allocation(3, on("a:2,b:1"))
    assert pool.total == 0


def test_a_host_named_twice_has_the_slots_of_both_entries():
    pool = SlotPool(0, parse_hosts("a:1,b:1,a:1"))
    assert pool.total == 3
    assert pool.allocate(2) == Allocation(2, on("a:2"))
    assert pool.allocate(1) == Allocation(1, on("b:1"))


def search_config(tmp_path, **searcher):
    return load_experiment_config(
        {
            "name": "search",
            "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
            "searcher": {"metric": "loss", "max_length": {"batches": 16}, **searcher},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
            "reproducibility": {"experiment_seed": 5},
        }
    )


def report(store, trial, metric):
    store.report_search_metric(trial.id, trial.target_length, metric)
    return store.trial(trial.id)


def test_every_step_is_recorded_so_that_a_runner_rebuilt_from_the_store_continues_the_search(tmp_path):
    config = search_config(tmp_path, name="adaptive_asha", max_trials=4, mode="aggressive", divisor=2)
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = record_experiment(store, config, str(tmp_path), slots=2)
        experiment = store.experiment(experiment_id)
        trials = store.trials(experiment_id)
        assert [t.request_id for t in trials] == [0, 1, 2, 3]
        # Rungs at 4, 8 and 16 batches (divisor 2): every trial first trains to 4.
        assert {(t.search_state, t.target_length) for t in trials} == {(SearchState.QUEUED, 4)}

        first = SearchRunner(store, experiment, config, tmp_path / "checkpoints")
        first.on_reported(report(store, trials[0], 0.5))  # the first at its rung: promoted, it trains on
        # A runner rebuilt from the store (a resume after a crash) answers the next report the same way.
        again = SearchRunner(store, experiment, config, tmp_path / "checkpoints")
        again.on_reported(report(store, trials[1], 0.9))
        answered = {t.request_id: t for t in store.trials(experiment_id)}
        assert (answered[0].target_length, answered[0].answered_length) == (8, 4)
        assert answered[1].answered_length == 4 and answered[1].search_state == SearchState.CLOSING
        assert store.searcher_state(experiment_id)["shutdown"] is False


def test_a_trial_that_ends_without_completing_its_operation_is_judged_by_its_last_validation(tmp_path):
    config = search_config(tmp_path, name="single")
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = record_experiment(store, config, str(tmp_path))
        (trial,) = store.trials(experiment_id)
        runner = SearchRunner(store, store.experiment(experiment_id), config, tmp_path / "checkpoints")
        store.set_search_state(trial.id, SearchState.RUNNING)
        store.record_metrics(trial.id, MetricKind.VALIDATION, 12, {"loss": 0.25})
        runner.on_run_ended(trial, State.COMPLETED)
        runner.close_idle(running=set())
        assert store.trial(trial.id).search_state == SearchState.CLOSED
        assert store.trial(trial.id).reported_metric == 0.25
        assert runner.shutdown and not runner.failed


def test_a_paused_trial_keeps_its_operation_and_a_failed_one_exits(tmp_path):
    config = search_config(tmp_path, name="random", max_trials=2)
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = record_experiment(store, config, str(tmp_path), slots=2)
        paused, failed = store.trials(experiment_id)
        runner = SearchRunner(store, store.experiment(experiment_id), config, tmp_path / "checkpoints")
        for trial in (paused, failed):
            store.set_search_state(trial.id, SearchState.RUNNING)
        runner.on_run_ended(paused, State.PAUSED)
        runner.on_run_ended(failed, State.ERROR)
        assert (store.trial(paused.id).search_state, store.trial(paused.id).target_length) == (SearchState.QUEUED, 16)
        assert store.trial(failed.id).search_state == SearchState.EXITED


def test_a_search_whose_trials_all_raise_invalid_hp_ends_failed_with_its_reason_kept_for_a_rebuilt_runner(tmp_path):
    config = search_config(tmp_path, name="random", max_trials=1)
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = record_experiment(store, config, str(tmp_path))
        experiment = store.experiment(experiment_id)
        runner = SearchRunner(store, experiment, config, tmp_path / "checkpoints")
        for _ in range(11):  # the first trial and its 10 replacements each raise InvalidHP
            (trial,) = [t for t in store.trials(experiment_id) if t.search_state == SearchState.QUEUED]
            store.set_search_state(trial.id, SearchState.RUNNING)
            runner.on_run_ended(trial, State.COMPLETED, invalid_hp=True)
        assert len(store.trials(experiment_id)) == 11
        assert runner.shutdown and runner.failed
        assert "raised InvalidHP more than the 10 times it replaces them" in runner.shutdown_reason
        rebuilt = SearchRunner(store, experiment, config, tmp_path / "checkpoints")
        assert rebuilt.shutdown and rebuilt.shutdown_reason == runner.shutdown_reason


def test_run_trial_runs_a_single_trial_only_and_says_where_a_search_runs(analytic, tmp_path):
    config = analytic.make_config(tmp_path, 5)
    config["hyperparameters"]["learning_rate"] = {"type": "double", "minval": 0.001, "maxval": 0.01}
    config["searcher"].update(name="random", max_trials=2)
    with pytest.raises(det.DetEstimatorError, match=r"A random search runs its trials in processes of their own"):
        det.run_trial(analytic.AnalyticTrial, config)

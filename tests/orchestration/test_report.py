"""The commands a run's summary suggests reach the store the run used."""

import io
import shlex

from det_estimator.orchestration import command_on
from det_estimator.orchestration._outcome import summarize
from det_estimator.orchestration._report import print_summary, print_trial_failures
from det_estimator.store import ExperimentStore, MetricKind, State, StoreLocation


def test_the_default_store_is_reached_without_naming_it(tmp_path, monkeypatch):
    store = tmp_path / "store.sqlite"
    monkeypatch.setenv("DET_ESTIMATOR_STORE", str(store))
    assert command_on(StoreLocation(path=store)) == "det-estimator"


def test_the_default_store_under_xdg_data_home_is_reached_without_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("DET_ESTIMATOR_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert command_on(StoreLocation(path=tmp_path / "det-estimator" / "store.sqlite")) == "det-estimator"


def test_another_store_is_named_quoted_for_the_shell(tmp_path, monkeypatch):
    monkeypatch.delenv("DET_ESTIMATOR_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    store = tmp_path / "my runs" / "it's.sqlite"
    # Pasted into a shell, it splits back into the program, the option and the very path.
    assert shlex.split(command_on(StoreLocation(path=store))) == ["det-estimator", "--store", str(store)]


def test_a_postgresql_store_is_named_without_its_password():
    # The shell the command is pasted into gives it (PGPASSWORD, ~/.pgpass); no terminal shows it.
    store = StoreLocation(url="postgresql://bob:s3cret@db.example:5432/team")
    assert command_on(store) == "det-estimator --store postgresql://bob@db.example:5432/team"


def _failed_trials(store, errors: list[dict]) -> list:
    """An experiment whose trials' one run each ended with ``errors``, in order."""
    experiment_id = store.create_experiment("search", {}, "/nowhere", "python3 train.py", 1, False)
    for error in errors:
        trial_id = store.create_trial(experiment_id, {}, 1, "/nowhere/checkpoints")
        run_id = store.start_run(trial_id)
        store.record_run_error(run_id, error)
        store.end_run(run_id, State.ERROR, exit_status=1)
    return store.trials(experiment_id)


def test_trials_whose_errors_differ_only_in_their_hyperparameters_values_are_shown_once(tmp_path):
    frames = 'Traceback (most recent call last):\n  File "model_def.py", line 41, in build_estimator\n'
    errors = [
        {"rank": 0, "origin": "MyTrial.build_estimator", "traceback": frames + f"ValueError: bad shape [{n}, 10]"}
        for n in (32, 128)
    ]
    errors.append({"rank": 0, "traceback": frames + "KeyError: 'lr'"})
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        trials = _failed_trials(store, errors)
        stream = io.StringIO()
        assert print_trial_failures(store, trials, stream) == trials
    assert stream.getvalue() == (
        "Trials 1, 2 failed on rank 0 in MyTrial.build_estimator (trial 1's error below; the others' differ only "
        f"in numbers):\n{frames}ValueError: bad shape [32, 10]\n\n"
        f"Trial 3 failed on rank 0:\n{frames}KeyError: 'lr'\n\n"
    )


def test_the_summary_of_a_search_names_the_trial_of_the_best_validation(tmp_path):
    config = {"searcher": {"name": "random", "metric": "loss", "smaller_is_better": True}}
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = store.create_experiment("search", config, str(tmp_path), "python3 train.py", 1, False)
        for loss in (0.5, 0.25, 0.75):
            trial_id = store.create_trial(experiment_id, {}, 1, tmp_path / "checkpoints")
            store.record_metrics(trial_id, MetricKind.VALIDATION, 10, {"loss": loss}, store.start_run(trial_id))
        store.set_state(experiment_id, State.COMPLETED)
        stream = io.StringIO()
        print_summary(summarize(store, experiment_id), stream)
    assert "\nBest validation: loss 0.25 after 10 batches (trial 2).\n" in stream.getvalue(), stream.getvalue()


def test_between_equal_validations_the_summary_names_the_later_one_which_retention_keeps(tmp_path):
    config = {"searcher": {"name": "single", "metric": "f1", "smaller_is_better": False}}
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = store.create_experiment("one", config, str(tmp_path), "python3 train.py", 1, False)
        trial_id = store.create_trial(experiment_id, {}, 1, tmp_path / "checkpoints")
        run_id = store.start_run(trial_id)
        for batches, f1 in ((100, 0.9), (200, 0.975), (300, 0.975), (400, 0.95)):
            store.record_metrics(trial_id, MetricKind.VALIDATION, batches, {"f1": f1}, run_id)
        store.set_state(experiment_id, State.COMPLETED)
        best = store.best_validation(experiment_id)
    assert (best.value, best.batches) == (0.975, 300)


def test_the_summary_of_a_search_paused_before_any_validation_promises_no_best_trial(tmp_path):
    config = {"searcher": {"name": "random", "metric": "loss", "smaller_is_better": True}}
    with ExperimentStore(tmp_path / "store.sqlite") as store:
        experiment_id = store.create_experiment("search", config, str(tmp_path), "python3 train.py", 1, False)
        for _ in range(2):
            store.start_run(store.create_trial(experiment_id, {}, 1, tmp_path / "checkpoints"))
        store.set_state(experiment_id, State.PAUSED)
        stream = io.StringIO()
        print_summary(summarize(store, experiment_id), stream)
    lines = stream.getvalue().splitlines()
    assert lines[2] == (
        "Trials: 2; `det-estimator trial list 1` ranks them. Checkpoints kept: 0 (`det-estimator checkpoint list 1`)."
    ), lines
    assert lines[3] == "Resume with: det-estimator experiment resume 1", lines

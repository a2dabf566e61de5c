"""A store filled through the store's own write API, for the web page's tests that need no real run."""

import pytest

from det_estimator.store import ExperimentStore, MetricKind, State

XSS = "<script>alert(1)</script>"

SEARCH_CONFIG = {
    "name": XSS,
    "entrypoint": "python3 search_script.py",
    "hyperparameters": {
        "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
        "width": {"type": "categorical", "vals": [8, "wide"]},
        "global_batch_size": 8,
    },
    "searcher": {"name": "random", "metric": "loss", "smaller_is_better": True, "max_length": {"batches": 30}},
}


@pytest.fixture
def filled(tmp_path):
    """A store with a random search of three trials (one named with a script tag) and a single-trial experiment."""
    path = tmp_path / "store.sqlite"
    with ExperimentStore(path) as store:
        search = store.create_experiment(XSS, SEARCH_CONFIG, str(tmp_path), "python3 search_script.py", 1, False)
        trials = []
        for x, width, final in ((0.1, 8, 0.3), (0.5, "wide", 0.1), (0.9, XSS, 0.2)):
            trial = store.create_trial(search, {"x": x, "width": width, "global_batch_size": 8}, 1, tmp_path / "ck")
            run = store.start_run(trial)
            for batches in (10, 20, 30):
                store.record_metrics(trial, MetricKind.TRAINING, batches, {"loss": final + 1 / batches}, run)
            store.record_metrics(trial, MetricKind.VALIDATION, 15, {"loss": final + 0.5, XSS: 1.0}, run)
            store.record_metrics(trial, MetricKind.VALIDATION, 30, {"loss": final, XSS: 2.0}, run)
            store.end_run(run, State.COMPLETED, 0)
            trials.append(trial)
        single_config = {
            **SEARCH_CONFIG,
            "name": "single one",
            "searcher": {**SEARCH_CONFIG["searcher"], "name": "single"},
        }
        single = store.create_experiment("single one", single_config, str(tmp_path), "model_def:Trial", 1, False)
        store.create_trial(single, {"x": 0.2}, 1, tmp_path / "ck")
        store.set_state(search, State.COMPLETED)
        # The single experiment runs in this process: ACTIVE, as long as the test runs.
    return path, search, single, trials

import pytest

from det_estimator.searcher import (
    Close,
    Create,
    ExitedReason,
    SearcherError,
    Shutdown,
    SingleSearch,
    ValidateAfter,
    make_search_method,
)

SINGLE = {"name": "single"}


def test_one_trial_with_the_experiment_seed(sim):
    config = sim.make_config(SINGLE, seed=42, max_length=500)
    method = make_search_method(config)
    assert isinstance(method, SingleSearch)
    assert method.progress() == 0.0
    assert method.initial_operations() == [Create(0, config.sample_hyperparameters(42), 42), ValidateAfter(0, 500)]
    assert method.on_validation_completed(0, 0.25, 500) == [Close(0)]
    assert method.on_trial_closed(0) == [Shutdown(failure=False)]
    assert method.progress() == 1.0


@pytest.mark.parametrize("reason", list(ExitedReason))
def test_an_early_exit_fails_the_search(sim, reason):
    method = make_search_method(sim.make_config(SINGLE))
    method.initial_operations()
    assert method.on_trial_exited_early(0, reason) == [Shutdown(failure=True)]


def test_an_exit_after_close_counts_as_closed(sim):
    method = make_search_method(sim.make_config(SINGLE))
    method.initial_operations()
    method.on_validation_completed(0, float("nan"), 6400)
    assert method.on_trial_exited_early(0, ExitedReason.ERRORED) == [Shutdown(failure=False)]


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (
            [("validate", 0, 1.0, 100)],
            r"Trial 0 of the single search was asked to validate after 6400\. "
            r"Received a validation after: 100",
        ),
        ([("validate", 1, 1.0, 6400)], "Trial 1 of the single search was never created"),
        ([("closed", 0)], "Trial 0 of the single search was not sent Close"),
        ([("validate", 0, 1.0, 6400), ("validate", 0, 1.0, 6400)], "Trial 0 of the single search has no ValidateAfter"),
        ([("validate", 0, 1.0, 6400), ("closed", 0), ("closed", 0)], "The single search has shut down"),
    ],
)
def test_events_the_search_cannot_be_in(sim, events, message):
    method = make_search_method(sim.make_config(SINGLE))
    method.initial_operations()
    *before, last = events
    calls = {"validate": method.on_validation_completed, "closed": method.on_trial_closed}
    for kind, *args in before:
        calls[kind](*args)
    kind, *args = last
    with pytest.raises(SearcherError, match=message):
        calls[kind](*args)


def test_initial_operations_only_once(sim):
    method = make_search_method(sim.make_config(SINGLE))
    method.initial_operations()
    with pytest.raises(SearcherError, match="initial_operations of the single search was already called"):
        method.initial_operations()


def test_a_metric_must_be_a_number(sim):
    method = make_search_method(sim.make_config(SINGLE))
    method.initial_operations()
    with pytest.raises(TypeError, match="must be a real number. Received: None"):
        method.on_validation_completed(0, None, 6400)


def test_a_method_runs_only_its_own_searcher(sim):
    with pytest.raises(ValueError, match="SingleSearch runs the 'single' searcher. Received: 'random'"):
        SingleSearch(sim.make_config({"name": "random", "max_trials": 2}))

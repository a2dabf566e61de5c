import math

from det_estimator.store import ExperimentStore, MetricKind, MetricRecord
from det_estimator.ui import _views as views

from .conftest import XSS


def row(trial_id, best=None, **hparams):
    return views.TrialRow(trial_id, "COMPLETED", 30, 0, hparams, {}, best)


def test_sort_trials_orders_numbers_as_numbers_and_puts_missing_values_last_either_way():
    rows = [row(1, 0.3), row(2, None), row(3, 10.0), row(4, math.nan), row(5, 0.25)]
    assert [r.id for r in views.sort_trials(rows, "best")] == [5, 1, 3, 2, 4]
    assert [r.id for r in views.sort_trials(rows, "best", descending=True)] == [3, 1, 5, 2, 4]


def test_sort_trials_by_a_hyperparameter_mixing_numbers_and_text():
    rows = [row(1, width="wide"), row(2, width=16), row(3, width=8), row(4)]
    assert [r.id for r in views.sort_trials(rows, "hp:width")] == [3, 2, 1, 4]


def test_nested_hyperparameters_flatten_to_dotted_names():
    assert views.flatten({"optimizer": {"lr": 0.1, "name": "adam"}, "units": [1, 2]}) == {
        "optimizer.lr": 0.1,
        "optimizer.name": "adam",
        "units": "[1, 2]",
    }


def test_experiment_rows_filter_by_state_and_by_part_of_the_name(filled):
    path, search, single, _ = filled
    with ExperimentStore(path) as store:
        assert [r.id for r in views.experiment_rows(store)] == [single, search]
        assert [r.id for r in views.experiment_rows(store, state="COMPLETED")] == [search]
        assert [r.id for r in views.experiment_rows(store, name="SINGLE")] == [single]
        (found,) = views.experiment_rows(store, name="<script>")
        assert (found.name, found.best, found.num_trials) == (XSS, 0.1, 3)


def test_the_experiment_page_ranks_trials_by_their_best_searcher_metric(filled):
    path, search, _, trials = filled
    with ExperimentStore(path) as store:
        page = views.experiment_page(store, search)
        assert [r.id for r in page.trials] == [trials[1], trials[2], trials[0]]
        assert page.best_trial_id == trials[1]
        assert page.hparam_names == ("global_batch_size", "width", "x")
        assert page.metric_names == (XSS, "loss")
        by_x = views.experiment_page(store, search, "hp:x", descending=True)
        assert [r.id for r in by_x.trials] == [trials[2], trials[1], trials[0]]


def test_parallel_coordinates_carry_every_trials_values_with_text_axes_labelled_and_escaped(filled):
    path, search, _, trials = filled
    with ExperimentStore(path) as store:
        charts = views.experiment_charts(store, search)
    parcoords = charts["parcoords"]
    labels = [dimension["label"] for dimension in parcoords["dimensions"]]
    assert labels == ["width", "x", "loss"]  # global_batch_size does not vary: no axis
    width, x, loss = parcoords["dimensions"]
    assert x["values"] == [0.1, 0.5, 0.9] and loss["values"] == [0.3, 0.1, 0.2]
    assert width["ticktext"] == ["8", "&lt;script&gt;alert(1)&lt;/script&gt;", "wide"]
    assert width["values"] == [0, 2, 1]
    assert parcoords["meta"] == trials
    assert {entry["hparam"]: entry["xaxis_type"] for entry in charts["scatter"]} == {"width": "category", "x": "linear"}


def test_learning_curves_draw_one_line_per_trial_the_best_thicker_and_skip_what_is_not_a_number():
    records = [
        MetricRecord(1, 7, MetricKind.VALIDATION, 10, {"loss": 0.5, "note": "text", "acc": math.nan}, 0.0),
        MetricRecord(2, 7, MetricKind.VALIDATION, 20, {"loss": 0.25, "acc": 0.9}, 0.0),
        MetricRecord(3, 8, MetricKind.VALIDATION, 10, {"loss": 0.75}, 0.0),
    ]
    curves = views.learning_curves(records, MetricKind.VALIDATION, best_trial_id=7)
    assert sorted(curves) == ["validation acc", "validation loss"]
    first, second = curves["validation loss"]
    assert (first["name"], first["x"], first["y"], first["line"]["width"]) == (
        "trial 7 (best)",
        [10, 20],
        [0.5, 0.25],
        4,
    )
    assert (second["name"], second["x"], second["y"]) == ("trial 8", [10], [0.75])
    assert curves["validation acc"][0]["x"] == [20]


def test_text_for_plotly_is_escaped_because_plotly_reads_some_html():
    assert views.plotly_text('<a href="javascript:x">&') == '&lt;a href="javascript:x"&gt;&amp;'


def test_asha_rungs_name_the_trials_that_reached_each_rung(tmp_path):
    from det_estimator.config import load_experiment_config
    from det_estimator.searcher import asha_rungs

    config = load_experiment_config(
        {
            "entrypoint": "python3 s.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
            "searcher": {
                "name": "adaptive_asha",
                "metric": "loss",
                "max_trials": 4,
                "mode": "aggressive",
                "divisor": 4,
                "max_length": {"batches": 64},
            },
        }
    )
    state = {"brackets": [{"rungs": [[[0.1, -2, 1], [0.2, -1, 0]], [[0.05, -3, 1]]]}]}
    rungs = asha_rungs(config, state)
    assert [(r.index, r.length, r.entries) for r in rungs] == [(0, 16, ((1, 0.1), (0, 0.2))), (1, 64, ((1, 0.05),))]
    assert [r.entries for r in asha_rungs(config, None)] == [(), ()]


def test_the_trial_page_shows_a_runs_error_on_one_line(filled):
    path, _, _, trials = filled
    with ExperimentStore(path) as store:
        run = store.start_run(trials[0])
        store.record_run_error(run, {"rank": 1, "type": "ValueError", "message": f"bad {XSS}", "traceback": "..."})
        page = views.trial_page(store, trials[0])
    assert page.error_line(page.runs[-1]) == f"rank 1: ValueError: bad {XSS}"
    assert page.error_line(page.runs[0]) == ""

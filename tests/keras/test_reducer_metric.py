"""ReducerMetric in model.compile and model.evaluate on one process (two processes: tests/distributed)."""

import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import average_precision_score, roc_auc_score

import det_estimator as det
from det_estimator import _root_cause
from det_estimator.keras._engine._keras_compat import KERAS_3
from det_estimator.reducers import AveragePrecision, MetricReducer, RocAuc
from det_estimator.reducers._accumulator import MetricReductionError

ROWS = 3001  # not a multiple of the batch size


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, 4)).astype(np.float32)
    y = (x[:, 0] + rng.normal(size=ROWS) > 1.0).astype(np.float32)
    return x, y


def scored_model(metrics, weighted_metrics=None):
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.layers[0].set_weights([np.array([[1.0], [0.5], [-0.25], [0.0]], np.float32), np.zeros(1, np.float32)])
    model.compile("sgd", "binary_crossentropy", metrics=metrics, weighted_metrics=weighted_metrics)
    return model


def test_evaluate_gives_scikit_learns_exact_values_where_keras_auc_is_binned():
    x, y = data()
    model = scored_model(
        [
            det.keras.ReducerMetric(RocAuc(), name="auc"),
            det.keras.ReducerMetric(AveragePrecision()),
            tf.keras.metrics.AUC(name="binned_auc"),
        ]
    )
    results = model.evaluate(x, y, batch_size=128, verbose=0, return_dict=True)
    scores = model.predict(x, verbose=0).ravel()
    assert results["auc"] == pytest.approx(roc_auc_score(y, scores), rel=0, abs=1e-12)
    assert results["average_precision"] == pytest.approx(average_precision_score(y, scores), rel=0, abs=1e-12)
    assert abs(results["binned_auc"] - roc_auc_score(y, scores)) > 1e-7  # Keras' own, with 200 thresholds
    as_list = model.evaluate(x, y, batch_size=128, verbose=0)
    assert as_list[1] == results["auc"]  # a fresh state, and evaluate's list holds the exact value too


def test_sample_weights_reach_the_reducer_through_weighted_metrics():
    x, y = data()
    weights = np.random.default_rng(1).uniform(0, 2, ROWS).astype(np.float32)  # Keras' float type
    model = scored_model([], weighted_metrics=[det.keras.ReducerMetric(RocAuc(), name="auc")])
    results = model.evaluate(x, y, sample_weight=weights, batch_size=100, verbose=0, return_dict=True)
    scores = model.predict(x, verbose=0).ravel()
    assert results["auc"] == pytest.approx(roc_auc_score(y, scores, sample_weight=weights), rel=0, abs=1e-12)


def test_each_evaluation_starts_afresh_and_fit_reports_each_epochs_exact_value():
    x, y = data()
    auc = det.keras.ReducerMetric(RocAuc(), name="auc")
    model = scored_model([auc])
    half = model.evaluate(x[:1000], y[:1000], verbose=0, return_dict=True)["auc"]
    scores = model.predict(x[:1000], verbose=0).ravel()
    assert half == pytest.approx(roc_auc_score(y[:1000], scores), abs=1e-12)
    batch_values = []
    record = tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batch_values.append(logs["auc"]))
    history = model.fit(x, y, epochs=2, batch_size=500, verbose=0, callbacks=[record])
    assert all(0.5 < value < 1.0 for value in history.history["auc"])
    assert np.isnan(batch_values).all()  # not computed inside the compiled step


def test_the_name_defaults_to_the_reducer_and_a_non_reducer_is_refused():
    assert det.keras.ReducerMetric(RocAuc()).name == "roc_auc"
    assert det.keras.ReducerMetric(AveragePrecision()).dtype == "float64"
    with pytest.raises(TypeError, match=r"Argument `reducer` must be a MetricReducer instance .* Received: reducer="):
        det.keras.ReducerMetric(roc_auc_score)


def test_a_failing_reducer_names_the_metric_and_the_error():
    class Broken(MetricReducer):
        def accumulate(self, metric):
            raise ValueError("cannot read this batch")

        def cross_slot_reduce(self, per_slot_metrics):
            return 0.0

    x, y = data()
    model = scored_model([det.keras.ReducerMetric(Broken(), name="broken")])
    with pytest.raises(MetricReductionError, match=r"(?s)Metric 'broken'.*Broken failed in accumulate.*cannot read"):
        model.evaluate(x, y, verbose=0)


def test_a_reducer_returning_none_is_an_error_not_a_nan_metric():
    class ForgetsToReturn(MetricReducer):
        def accumulate(self, metric):
            return 1

        def cross_slot_reduce(self, per_slot_metrics):
            sum(per_slot_metrics)

    x, y = data()
    model = scored_model([det.keras.ReducerMetric(ForgetsToReturn(), name="count")])
    with pytest.raises(MetricReductionError, match=r"Metric 'count': ForgetsToReturn.cross_slot_reduce returned None"):
        model.evaluate(x, y, verbose=0)
    _root_cause.forget()


@pytest.mark.parametrize(
    "file_name",
    [
        "model.keras",
        "model.h5",
        pytest.param(
            "saved_model",
            marks=pytest.mark.skipif(KERAS_3, reason="Keras 3 saves .keras and .h5 files; a SavedModel is an export"),
        ),
    ],
)
def test_a_model_compiled_with_built_in_reducers_is_saved_and_loaded_back(tmp_path, file_name):
    from det_estimator.reducers import F1, BinnedRocAuc

    x, y = data()
    model = scored_model(
        [
            det.keras.ReducerMetric(RocAuc(num_threads=2), name="auc"),
            det.keras.ReducerMetric(BinnedRocAuc(bins=np.linspace(0, 1, 11), value="error_bound"), name="bound"),
            det.keras.ReducerMetric(F1(average="micro", threshold=0.4)),
        ]
    )
    expected = model.evaluate(x, y, batch_size=128, verbose=0, return_dict=True)
    model.save(tmp_path / file_name)
    loaded = tf.keras.models.load_model(tmp_path / file_name)  # no custom_objects: ReducerMetric is registered

    assert loaded.evaluate(x, y, batch_size=128, verbose=0, return_dict=True) == expected
    # Keras 3 lists compile()'s metrics inside one container metric.
    metrics = [inner for metric in loaded.metrics for inner in [metric, *(getattr(metric, "metrics", None) or [])]]
    reducers = {metric.name: metric.reducer for metric in metrics if isinstance(metric, det.keras.ReducerMetric)}
    assert reducers["auc"].num_threads == 2
    np.testing.assert_array_equal(reducers["bound"].edges, np.linspace(0, 1, 11))
    assert (reducers["f1"].average, reducers["f1"].threshold) == ("micro", 0.4)


def test_a_reducer_of_your_own_is_copied_and_saved_through_its_get_config():
    class Count(MetricReducer):
        def __init__(self, scale=1.0):
            self.scale = scale

        def accumulate(self, metric):
            return len(metric["labels"])

        def cross_slot_reduce(self, per_slot_metrics):
            return self.scale * sum(per_slot_metrics)

    metric = det.keras.ReducerMetric(Count(), name="count")
    assert det.keras.ReducerMetric.from_config(metric.get_config()).reducer is metric.reducer  # as Keras copies it

    class ScaledCount(Count):
        def get_config(self):
            return {"scale": self.scale}

    config = det.keras.ReducerMetric(ScaledCount(2.0), name="count").get_config()
    with pytest.raises(ValueError, match=r"custom_objects=\{'ScaledCount': ScaledCount\}"):
        det.keras.ReducerMetric.from_config(config)
    with tf.keras.utils.custom_object_scope({"ScaledCount": ScaledCount}):
        assert det.keras.ReducerMetric.from_config(config).reducer.scale == 2.0


class CountingRocAuc(RocAuc):
    """RocAuc that records how many rows each accumulate() call received (class-wide: evaluations copy it)."""

    calls: list = []

    def accumulate(self, metric):
        CountingRocAuc.calls.append(np.size(metric["predictions"]))
        return super().accumulate(metric)


def test_ranking_reducers_get_the_batches_queued_in_the_step_in_a_few_large_batches(monkeypatch):
    from det_estimator.keras import _reducer_metric

    monkeypatch.setattr(_reducer_metric, "_GROUP_ROWS", 300)  # handed over a few batches at a time
    monkeypatch.setattr(CountingRocAuc, "calls", [])
    x, y = data()
    # Scores with ties: the rounded first feature itself (Keras 3's evaluate and predict compute a
    # sigmoid a few ULPs apart, which splits ties differently).
    x = np.round(x, 1)
    scores = x[:, 0]
    weights = np.random.default_rng(2).uniform(0, 2, ROWS).astype(np.float32)
    weights[::7] = 0.0
    metric = det.keras.ReducerMetric(CountingRocAuc(), name="auc")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.layers[0].set_weights([np.array([[1.0], [0.0], [0.0], [0.0]], np.float32), np.zeros(1, np.float32)])
    model.compile("sgd", "mse", weighted_metrics=[metric])
    for rows in (ROWS, 1000):  # the second evaluation starts from empty buffers
        CountingRocAuc.calls.clear()
        results = model.evaluate(x[:rows], y[:rows], sample_weight=weights[:rows], batch_size=128, verbose=0)
        expected = roc_auc_score(y[:rows], scores[:rows], sample_weight=weights[:rows])
        assert results[1] == pytest.approx(expected, rel=0, abs=1e-12)
        # The runs of full batches of 128 (groups of 2, then the short last batch) are one call each.
        assert sum(CountingRocAuc.calls) == rows and len(CountingRocAuc.calls) <= rows // 256 + 2
    assert metric.variables == []  # nothing for Keras to sum across processes or to save


def test_a_later_evaluation_with_labels_of_another_dtype_is_exact_too():
    x, y = data()
    model = scored_model([det.keras.ReducerMetric(AveragePrecision(), name="ap")])
    scores = model.predict(x, verbose=0).ravel()
    for labels in (y, y.astype(np.int64), y.astype(bool)):
        results = model.evaluate(x, labels, batch_size=256, verbose=0, return_dict=True)
        assert results["ap"] == pytest.approx(average_precision_score(y, scores), rel=0, abs=1e-12)


def test_the_value_is_reduced_once_however_often_it_is_read(monkeypatch):
    reductions = []
    reduce = det.keras.ReducerMetric._reduce
    monkeypatch.setattr(det.keras.ReducerMetric, "_reduce", lambda self: reductions.append(1) or reduce(self))
    x, y = data()
    metric = det.keras.ReducerMetric(RocAuc(), name="auc")
    model = scored_model([metric])
    model.evaluate(x, y, batch_size=128, verbose=0)
    value = [float(metric.result()) for _ in range(3)]
    assert len(reductions) == 1 and len(set(value)) == 1
    model.evaluate(x[:100], y[:100], batch_size=128, verbose=0)
    assert len(reductions) == 2


def test_a_ranking_reducers_step_appends_with_one_enqueue_and_no_control_flow():
    # A tf.cond in the step (to grow a buffer) cost more than the rest of the step's appending.
    metric = det.keras.ReducerMetric(RocAuc(), name="auc")
    labels, scores = tf.zeros([128]), tf.zeros([128, 1])

    @tf.function
    def step(y, p):
        metric.update_state(y, p)

    graph = step.get_concrete_function(labels, scores).graph.as_graph_def()
    kinds = [node.op for node in graph.node] + [
        node.op for function in graph.library.function for node in function.node_def
    ]
    assert not {"If", "StatelessIf", "While", "StatelessWhile", "PyFunc", "EagerPyFunc"} & set(kinds)
    assert kinds.count("QueueEnqueueV2") == 1


def test_the_full_batches_reach_the_reducer_as_one_batch_and_the_short_last_one_after_them(monkeypatch):
    monkeypatch.setattr(CountingRocAuc, "calls", [])
    x, y = data()
    model = scored_model([det.keras.ReducerMetric(CountingRocAuc(), name="auc")])
    results = model.evaluate(x, y, batch_size=128, verbose=0, return_dict=True)
    assert CountingRocAuc.calls == [ROWS - ROWS % 128, ROWS % 128]
    assert results["auc"] == pytest.approx(roc_auc_score(y, model.predict(x, verbose=0).ravel()), rel=0, abs=1e-12)


def test_a_batch_whose_labels_and_scores_differ_in_size_is_refused_even_when_the_totals_match():
    metric = det.keras.ReducerMetric(RocAuc(), name="auc")

    @tf.function
    def step(labels, scores):
        metric.update_state(labels, scores)

    step(tf.constant([0.0, 1.0, 1.0]), tf.constant([0.1, 0.2, 0.3, 0.4]))
    step(tf.constant([0.0, 1.0, 0.0, 1.0]), tf.constant([0.5, 0.6, 0.7]))
    with pytest.raises(MetricReductionError, match="RocAuc"):
        metric.result()


def test_under_a_strategy_of_one_device_the_step_enqueues_too_and_the_value_is_exact():
    x, y = data()
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        metric = det.keras.ReducerMetric(RocAuc(), name="auc")
        model = scored_model([metric])
    results = model.evaluate(x, y, batch_size=128, verbose=0, return_dict=True)
    assert metric._queue is not None  # the queue, not a call to accumulate per batch
    assert results["auc"] == pytest.approx(roc_auc_score(y, model.predict(x, verbose=0).ravel()), rel=0, abs=1e-12)

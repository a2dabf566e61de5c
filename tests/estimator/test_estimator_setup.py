import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import roc_auc_score

from det_estimator import reducers
from det_estimator.core import DummyDistributedContext
from det_estimator.estimator._estimator_setup import GraphRecorder, _session_config, rebuild_estimator
from det_estimator.reducers import make_metric


def model_fn(features, labels, mode):
    raise AssertionError("never built here")


def rebuilt(estimator, model_dir):
    return rebuild_estimator(estimator, str(model_dir), 0, DummyDistributedContext(), GraphRecorder())


def test_the_folder_tensorflow_made_for_an_estimator_without_model_dir_is_removed(tmp_path):
    user_estimator = tf.estimator.Estimator(model_fn)
    automatic = Path(user_estimator.model_dir)
    assert automatic.parent == Path(tempfile.gettempdir()) and automatic.is_dir()
    estimator = rebuilt(user_estimator, tmp_path / "run")
    assert estimator.model_dir == str(tmp_path / "run")
    assert not automatic.exists()


def test_a_model_dir_the_user_chose_or_filled_is_left_alone(tmp_path):
    chosen = tmp_path / "tmp_chosen"
    chosen.mkdir()
    rebuilt(tf.estimator.Estimator(model_fn, model_dir=str(chosen)), tmp_path / "run")
    assert chosen.is_dir()
    filled = Path(tempfile.mkdtemp())
    (filled / "checkpoint").write_text("kept")
    try:
        rebuilt(tf.estimator.Estimator(model_fn, model_dir=str(filled)), tmp_path / "run")
        assert (filled / "checkpoint").read_text() == "kept"
    finally:
        (filled / "checkpoint").unlink()
        filled.rmdir()


def test_each_process_gets_its_local_rank_gpu_and_shares_them_when_there_are_fewer(monkeypatch):
    def visible(gpus: int, local_rank: int) -> str:
        monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind: [f"GPU:{i}" for i in range(gpus)])
        process = SimpleNamespace(size=4, local_rank=local_rank)
        return _session_config(None, process).gpu_options.visible_device_list

    assert [visible(4, rank) for rank in range(4)] == ["0", "1", "2", "3"]
    # Two GPUs for four processes: never a GPU 2 or 3, which TensorFlow would refuse.
    assert [visible(2, rank) for rank in range(4)] == ["0", "1", "0", "1"]
    assert visible(0, 3) == ""


def scored_data(num_examples: int = 300):
    rng = np.random.default_rng(5)
    labels = (rng.random(num_examples) < 0.3).astype(np.int64)
    scores = np.round(rng.random(num_examples) * 0.6 + 0.3 * labels, 1).astype(np.float32)  # many ties
    return labels, scores


def evaluate_metrics(tmp_path, make_metrics):
    """Evaluates, through the controller's Estimator, the metrics ``make_metrics(labels, scores)`` returns."""
    labels, scores = scored_data()

    def input_fn():
        return tf.data.Dataset.from_tensor_slices(({"score": scores}, labels)).batch(32)

    def scoring_model_fn(features, labels, mode):
        bias = tf.compat.v1.get_variable("bias", initializer=0.0)
        predictions = features["score"] + 0.0 * bias
        loss = tf.reduce_mean(predictions) + bias
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=make_metrics(labels, predictions))

    with tf.Graph().as_default():
        tf.compat.v1.get_variable("bias", initializer=0.0)
        tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            checkpoint = tf.compat.v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    estimator = rebuilt(tf.estimator.Estimator(scoring_model_fn), tmp_path / "run")
    return estimator.evaluate(input_fn, checkpoint_path=checkpoint), labels, scores


def test_make_metric_is_fed_on_the_thread_that_evaluates_not_by_its_py_func(tmp_path):
    threads = set()

    class ThreadRecordingSum(reducers.MetricReducer):
        def accumulate(self, metric):
            threads.add(threading.get_ident())
            self.total = getattr(self, "total", 0.0) + float(np.sum(metric))
            return self.total

        def cross_slot_reduce(self, per_slot_metrics):
            return sum(per_slot_metrics)

    def metrics(labels, predictions):
        return {
            "auc": make_metric({"labels": labels, "predictions": predictions}, reducers.RocAuc(), np.float64),
            "sum": make_metric(predictions, ThreadRecordingSum(), np.float64),
        }

    results, labels, scores = evaluate_metrics(tmp_path, metrics)
    assert threads == {threading.get_ident()}
    assert results["auc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert results["sum"] == pytest.approx(float(np.sum(scores, dtype=np.float64)), rel=1e-6)


def test_a_make_metric_whose_update_op_the_user_regrouped_is_still_fed_and_scalars_arrive_as_numpy_scalars(tmp_path):
    seen = []

    def record(batches):
        seen.extend(batches)
        return float(np.sum([np.sum(batch) for batch in batches]))

    def metrics(labels, predictions):
        sum_value, sum_update = make_metric(predictions, reducers.Sum(), np.float64)
        examples = tf.compat.v1.Variable(0, collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], name="examples")
        return {
            # No longer the pair make_metric returned: it runs as the user grouped it.
            "sum": (sum_value, tf.group(sum_update, examples.assign_add(tf.size(predictions)))),
            "examples": (tf.identity(examples), tf.no_op()),
            "sum_again": (sum_value, sum_update),  # the pair itself, but its update op runs as grouped above
            "max": make_metric(tf.reduce_max(predictions), record, np.float64),  # a scalar per batch
        }

    results, labels, scores = evaluate_metrics(tmp_path, metrics)
    assert results["sum"] == pytest.approx(float(np.sum(scores, dtype=np.float64)), rel=1e-6)
    batch_maxima = [scores[start : start + 32].max() for start in range(0, len(scores), 32)]
    assert results["examples"] == len(scores)
    assert results["sum_again"] == results["sum"]
    # As a plain tf.estimator's py_func hands them: NumPy scalars of the tensor's dtype.
    assert [type(batch) for batch in seen] == [np.float32] * len(batch_maxima)
    assert results["max"] == pytest.approx(float(np.sum(batch_maxima, dtype=np.float64)), rel=1e-6)

"""Metrics over every process's data: Keras' metric states summed across processes give the exact global values."""

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from det_estimator.keras._api._context import KerasContext, Optimizations, TrainingContext
from det_estimator.keras._engine._metrics import global_metrics, local_metrics


def classifier() -> tf.keras.Model:
    tf.keras.utils.set_random_seed(3)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(loss="binary_crossentropy", metrics=["accuracy", tf.keras.metrics.AUC(name="auc")])
    return model


def data(records: int = 63):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(records, 4)).astype("float32")
    y = (x[:, 0] + 0.5 * rng.normal(size=records) > 0).astype("float32")
    return x, y


def test_summed_states_of_uneven_shares_give_the_metrics_of_all_the_data(one_of_many):
    model, (x, y) = classifier(), data()
    whole = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)
    shares = [(x[:37], y[:37]), (x[37:], y[37:])]  # uneven, as the last process's share may be
    model.evaluate(*shares[1], batch_size=8, verbose=0)
    other = local_metrics(model)
    separate = [model.evaluate(*shares[1], batch_size=8, return_dict=True, verbose=0)]
    separate.insert(0, model.evaluate(*shares[0], batch_size=8, return_dict=True, verbose=0))

    combined = global_metrics(model, one_of_many(0, 2, [None, other]))

    assert combined == pytest.approx(whole, rel=1e-5)
    # The mean of each share's values (the reference's way) is not the global value.
    mean_loss = np.mean([values["loss"] for values in separate])
    assert abs(mean_loss - whole["loss"]) > 1e-3


def test_a_process_that_saw_no_data_leaves_the_metrics_of_the_others(one_of_many):
    model, (x, y) = classifier(), data()
    model.evaluate(x[:8], y[:8], batch_size=8, verbose=0)  # builds the metrics
    model.reset_metrics()
    # What a process without data holds: reset states, and NaN for what a custom step logs beside the metrics.
    nothing = local_metrics(model, {"loss": float("nan"), "grad_norm": float("nan")}, examples=0)
    whole = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)

    combined = global_metrics(model, one_of_many(1, 2, [nothing, None]), {"grad_norm": 0.5}, examples=len(x))

    assert combined == pytest.approx({**whole, "grad_norm": 0.5}, rel=1e-5)


def test_context_evaluate_returns_the_metrics_of_every_process_data(one_of_many):
    model, (x, y) = classifier(), data()
    whole = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)
    model.evaluate(x[1::2], y[1::2], batch_size=8, verbose=0)
    distributed = one_of_many(0, 2, [None, local_metrics(model)])
    context = KerasContext(distributed, None, {}, 0, Optimizations(), None, "BATCH_INFERENCE")
    x_share, y_share = context.wrap_data(x, y)

    result = context.evaluate(model, x_share, y_share, batch_size=8, verbose=0, return_dict=True)
    assert result == pytest.approx(whole, rel=1e-5)
    assert context.evaluate(model, x_share, y_share, batch_size=8, verbose=0) == pytest.approx(
        [whole["loss"], whole["accuracy"], whole["auc"]], rel=1e-5
    )


def test_one_process_keeps_keras_values(one_of_many):
    model, (x, y) = classifier(), data()
    whole = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)
    assert global_metrics(model, one_of_many(0, 1)) == pytest.approx(whole, rel=1e-7)


class RecordingTrain:
    """The validations a trial's ``core_context.train`` was given."""

    def __init__(self) -> None:
        self.validations = []

    def report_validation_metrics(self, steps, metrics):
        self.validations.append((steps, metrics))


def test_context_evaluate_in_a_trial_reports_the_searcher_metric_under_its_val_name(one_of_many):
    # searcher.metric: val_loss, the name fit's History shows; Keras' evaluate calls it loss.
    model, (x, y) = classifier(), data()
    train = RecordingTrain()
    training = TrainingContext(
        hparams={},
        trial_id=1,
        experiment_id=1,
        seed=0,
        core=SimpleNamespace(train=train),
        launched=True,
        searcher_metric="val_loss",
    )
    context = KerasContext(one_of_many(0, 1), training, {}, 0, Optimizations(), None, "TRIAL")

    result = context.evaluate(model, x, y, batch_size=8, verbose=0, return_dict=True)

    assert set(result) == {"loss", "accuracy", "auc"}  # what Keras returns, unchanged
    ((steps, reported),) = train.validations
    assert steps == 0
    assert reported["val_loss"] == reported["loss"] == pytest.approx(result["loss"])
    assert reported["accuracy"] == pytest.approx(result["accuracy"])

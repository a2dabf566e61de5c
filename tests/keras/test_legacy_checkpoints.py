"""A TFKerasTrial's checkpoint in the layout written before the one Keras format: resumed, loaded, described."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind
from det_estimator.config import load_experiment_config
from det_estimator.keras import TFKerasTrialContext
from det_estimator.keras._engine._keras_compat import KERAS_3

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import legacy_keras_checkpoints as legacy  # noqa: E402

# The first layouts were written by det-estimator on Keras 2 only: no Keras 3 checkpoint has them.
pytestmark = pytest.mark.skipif(KERAS_3, reason="checkpoints of the first layouts were written on Keras 2 only")

LEARNING_RATE, GLOBAL_BATCH = 0.01, 8


def trained_model(analytic_keras, tmp_path, batches: int) -> tf.keras.Model:
    """The analytic trial's model after ``batches`` batches of its data in order, trained by plain model.fit."""
    raw = analytic_keras.make_config(tmp_path, batches)
    context = TFKerasTrialContext(load_experiment_config(raw), raw["hyperparameters"], 1)
    model = analytic_keras.AnalyticKerasTrial(context).build_model()
    x, y = analytic_keras.FEATURES[:, None], analytic_keras.TARGETS[:, None]
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()
    model.fit(data, steps_per_epoch=batches, epochs=1, verbose=0)
    return model


def test_a_trial_resumes_a_checkpoint_of_the_first_layout_at_its_batch(analytic_keras, tmp_path):
    first = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 5))
    trial_checkpoints = Path(first.checkpoints[-1]["path"]).parent
    model = trained_model(analytic_keras, tmp_path / "plain", 10)
    written = legacy.seal_trial_v1(
        trial_checkpoints,
        model,
        10,
        callbacks=[(analytic_keras.Events, {"checkpoints": 2, "array": np.arange(3.0) * 2})],
        last_validation_batches=10,
    )
    assert checkpoint_kind(written) is CheckpointKind.KERAS_TRIAL

    second = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(tmp_path, 23))

    assert second.batches_trained == 23
    assert [v["batches"] for v in second.validations] == [15, 20, 23]
    analytic_keras.assert_closed_form(second.validations)
    losses = [t["metrics"]["loss"] for t in second.training]
    expected = analytic_keras.expected_workload_losses(23, 5, LEARNING_RATE, GLOBAL_BATCH)
    assert losses == pytest.approx(expected[2:], rel=1e-5)
    loaded = [e for e in analytic_keras.events(tmp_path / "events") if e["event"] == "load_state"]
    assert loaded == [{"event": "load_state", "checkpoints": 2, "array": [0.0, 2.0, 4.0]}]


def test_a_checkpoint_of_the_first_layout_loads_into_a_model_and_its_saved_model_serves(analytic_keras, tmp_path):
    model = trained_model(analytic_keras, tmp_path / "plain", 10)
    path = tmp_path / "checkpoint"
    legacy.write_trial_v1(path, model, 10)
    expected = model.predict(analytic_keras.SERVING_INPUT, verbose=0)

    # It holds no architecture: the weights go into a model built as in training.
    raw = analytic_keras.make_config(tmp_path / "fresh", 1)
    context = TFKerasTrialContext(load_experiment_config(raw), raw["hyperparameters"], 1)
    built = analytic_keras.AnalyticKerasTrial(context).build_model()
    loaded = det.keras.load_model_from_checkpoint_path(path, model=built)
    np.testing.assert_allclose(loaded(analytic_keras.SERVING_INPUT).numpy(), expected, rtol=1e-6)

    served = tf.saved_model.load(str(path / "saved_model"))
    (outputs,) = served.signatures["serving_default"](x=tf.constant(analytic_keras.SERVING_INPUT)).values()
    np.testing.assert_allclose(outputs.numpy(), expected, rtol=1e-6)

"""Every step of a Keras evaluation counts as progress for the launcher's hang watch."""

import numpy as np
import tensorflow as tf

from det_estimator import _heartbeat
from det_estimator.core import DummyDistributedContext
from det_estimator.keras._engine._metrics import GlobalMetrics


def test_each_step_of_context_evaluate_counts_as_progress():
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse")
    before = _heartbeat.beats()
    callbacks = [GlobalMetrics(DummyDistributedContext())]
    model.evaluate(np.zeros((10, 2)), np.zeros((10, 1)), batch_size=2, callbacks=callbacks, verbose=0)
    assert _heartbeat.beats() - before == 5  # one per step: 10 records in batches of 2


def test_each_step_of_a_keras_trials_validation_counts_as_progress():
    from det_estimator.keras._engine._callbacks import TrialCallbacks

    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(loss="mse")
    callbacks = TrialCallbacks([], model, batches_per_epoch=None, tensorboard_dir=None, rank=0)
    before = _heartbeat.beats()
    model.evaluate(np.zeros((6, 2)), np.zeros((6, 1)), batch_size=2, callbacks=callbacks.for_evaluate, verbose=0)
    assert _heartbeat.beats() - before == 3

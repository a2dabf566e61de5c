"""The closed form of the one-weight analytic model, shared by its EstimatorTrial and its TFKerasTrial.

The model is ``prediction = w * x`` with a mean squared error loss and plain gradient
descent, on 64 fixed records. With the records dealt round-robin to N processes, each
batching ``global_batch_size // N``, the averaged gradient of a step equals the
gradient of the one-process batch of ``global_batch_size`` records, so the trajectory
is the same on any number of processes: :func:`expected_weight` computes it.

It imports neither TensorFlow nor det-estimator, so the Keras trial needs no tf.estimator.
"""

import numpy as np

NUM_RECORDS = 64
FEATURES = (1.0 + 0.1 * (np.arange(NUM_RECORDS) % 7)).astype(np.float32)
TARGETS = (3.0 * FEATURES + 0.05 * (np.arange(NUM_RECORDS) % 3)).astype(np.float32)
SERVING_INPUT = np.array([0.5, 2.0, 4.0], dtype=np.float32)


def trajectory(batches: int, learning_rate: float, global_batch_size: int):
    """The loss of every batch (before its update) and the weight after the last one."""
    weight = np.float64(0.0)
    losses = []
    per_epoch = NUM_RECORDS // global_batch_size
    for step in range(batches):
        start = (step % per_epoch) * global_batch_size
        x = FEATURES[start : start + global_batch_size].astype(np.float64)
        y = TARGETS[start : start + global_batch_size].astype(np.float64)
        losses.append(float(np.mean((weight * x - y) ** 2)))
        weight -= learning_rate * np.mean(2.0 * (weight * x - y) * x)
    return losses, float(weight)


def expected_weight(batches: int, learning_rate: float, global_batch_size: int) -> float:
    """The weight after ``batches`` steps of gradient descent over the repeated records."""
    return trajectory(batches, learning_rate, global_batch_size)[1]


def expected_last_batch_means(batches: int, scheduling_unit: int, global_batch_size: int):
    """The mean feature of the last batch of each workload (the ``mean_x`` scalar summary)."""
    per_epoch = NUM_RECORDS // global_batch_size
    means = []
    for last in range(scheduling_unit - 1, batches, scheduling_unit):
        start = (last % per_epoch) * global_batch_size
        means.append(float(np.mean(FEATURES[start : start + global_batch_size].astype(np.float64))))
    return means


def expected_workload_losses(batches: int, scheduling_unit: int, learning_rate: float, global_batch_size: int):
    """The mean training loss of each workload of ``scheduling_unit`` batches."""
    losses = trajectory(batches, learning_rate, global_batch_size)[0]
    return [float(np.mean(losses[i : i + scheduling_unit])) for i in range(0, batches, scheduling_unit)]

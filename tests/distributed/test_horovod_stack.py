"""Proves the stack: tf.estimator trains under Horovod with Gloo on two real processes."""

import json

import numpy as np
import pytest

# The two-rank pool is one per test process: every module that uses it runs on the same one.
pytestmark = pytest.mark.xdist_group("two_rank_pool")

STEPS = 5
LEARNING_RATE = 0.01
FEATURES = np.array([1.0, 2.0, 3.0, 4.0])


def averaged_sgd_trajectory(num_ranks: int, steps: int) -> float:
    """The weight that SGD on the ranks' averaged gradients reaches (see the worker's model)."""
    weight = 0.0
    for _ in range(steps):
        gradients = [np.mean(2 * (weight * FEATURES - (2.0 + 3.0 * r) * FEATURES) * FEATURES) for r in range(num_ranks)]
        weight -= LEARNING_RATE * np.mean(gradients)
    return weight


@pytest.mark.timeout(300)
def test_two_ranks_on_different_data_end_with_identical_averaged_weights(horovod_job, tmp_path):
    job = horovod_job("train_linear_estimator.py", ["--output-dir", str(tmp_path), "--steps", str(STEPS)])
    assert job.returncode == 0, job.stdout[-5000:]

    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [r["size"] for r in reports] == [2, 2]
    assert all(len(r["local_gradients"]) == STEPS for r in reports)

    # The ranks really saw different data: their local gradients disagree at every step...
    for gradient_0, gradient_1 in zip(reports[0]["local_gradients"], reports[1]["local_gradients"]):
        assert abs(gradient_0 - gradient_1) > 1.0
    # ...yet the allreduce kept their weights identical, on the averaged-gradient trajectory.
    assert reports[0]["final_weight"] == reports[1]["final_weight"]
    assert reports[0]["final_weight"] == pytest.approx(averaged_sgd_trajectory(2, STEPS), rel=1e-5)
    assert reports[0]["final_weight"] != pytest.approx(averaged_sgd_trajectory(1, STEPS), rel=1e-2)

"""Trains a one-weight tf.estimator model on every Horovod rank, each on its own data.

Launched by tests/distributed/test_horovod_stack.py under ``horovodrun -np 2 --gloo``.
Each rank writes ``rank<N>.json`` into the output directory with its local gradient at
every step (before the allreduce) and its final weight, so the test can check both that
the ranks disagreed locally and that they ended identical.

The model is ``prediction = w * x`` with a mean squared error loss: its SGD trajectory
under averaged gradients has a closed form the test recomputes in NumPy.
"""

import argparse
import json
import os

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

FEATURES = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
LEARNING_RATE = 0.01


def rank_targets(rank: int) -> np.ndarray:
    """Each rank learns a different slope, so its local gradients differ from the others'."""
    return (2.0 + 3.0 * rank) * FEATURES


def model_fn(features, labels, mode):
    weight = tf.compat.v1.get_variable("w", shape=[], initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(weight * features["x"] - labels))
    (local_gradient,) = tf.gradients(loss, [weight])
    optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE))
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    recorder = GradientRecorder(local_gradient)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[recorder])


class GradientRecorder(tf.estimator.SessionRunHook):
    """Collects this rank's local gradient at every step, before Horovod averages it."""

    gradients: list = []

    def __init__(self, gradient):
        self._gradient = gradient

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._gradient)

    def after_run(self, run_context, run_values):
        GradientRecorder.gradients.append(float(run_values.results))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    hvd.init()
    rank = hvd.rank()

    def input_fn():
        data = ({"x": FEATURES}, rank_targets(rank))
        return tf.data.Dataset.from_tensors(data).repeat()

    session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    estimator = tf.estimator.Estimator(
        model_fn,
        model_dir=os.path.join(args.output_dir, f"model_rank{rank}"),
        config=tf.estimator.RunConfig(session_config=session_config, save_checkpoints_steps=args.steps),
    )
    estimator.train(input_fn, steps=args.steps, hooks=[hvd.BroadcastGlobalVariablesHook(0)])

    report = {"rank": rank, "size": hvd.size(), "local_gradients": GradientRecorder.gradients}
    report["final_weight"] = float(estimator.get_variable_value("w"))
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()

"""Trains the analytic one-weight model with Keras' guide's custom train step, once for each optimizer kind.

The step takes ``tape.gradient`` and calls ``apply_gradients`` (see
``analytic_keras_trial.GuideTrainStep``); the optimizer is wrapped as
``TFKerasTrialContext.wrap_optimizer`` wraps it on several processes
(``_horovod.keras_distributed_optimizer``), then in a ``LossScaleOptimizer`` for the
loss-scaled kinds, as the analytic Keras trial does. Each rank trains on its half of every
global batch of 8 of the analytic records, so with averaged gradients the weight follows
``analytic_trial.trajectory``. Each rank writes ``rank<N>.json``: the weight each kind
reached, by kind.

Usage: keras_custom_train_step.py --output-dir DIR --batches N
"""

import argparse
import json
import os
import sys
from pathlib import Path

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))

from analytic_keras_trial import GuideTrainStep  # noqa: E402
from analytic_trial import FEATURES, NUM_RECORDS, TARGETS  # noqa: E402

from det_estimator import _horovod  # noqa: E402

GLOBAL_BATCH, LEARNING_RATE = 8, 0.01
KINDS = {
    "optimizer": {},
    "legacy_optimizer": {"legacy_optimizer": True},
    "loss_scaled": {"loss_scaled": True},
    "loss_scaled_legacy_optimizer": {"loss_scaled": True, "legacy_optimizer": True},
}


def trained_weight(batches: int, rank: int, size: int, legacy_optimizer: bool = False, loss_scaled: bool = False):
    optimizers = tf.keras.optimizers.legacy if legacy_optimizer else tf.keras.optimizers
    optimizer = _horovod.keras_distributed_optimizer(
        optimizers.SGD(LEARNING_RATE),
        aggregation_frequency=1,
        average_aggregated_gradients=True,
        gradient_compression=False,
    )
    if loss_scaled:
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    model = GuideTrainStep(
        [tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")]
    )
    model.compile(optimizer, loss="mse")
    for step in range(batches):
        start = (step % (NUM_RECORDS // GLOBAL_BATCH)) * GLOBAL_BATCH
        rows = slice(start + rank, start + GLOBAL_BATCH, size)
        model.train_on_batch(FEATURES[rows, None], TARGETS[rows, None])
    return float(model.layers[-1].kernel.numpy().ravel()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    if "HOROVOD_RANK" in os.environ:
        _horovod.init()
    rank, size = _horovod.rank(), _horovod.size()
    weights = {kind: trained_weight(args.batches, rank, size, **options) for kind, options in KINDS.items()}
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as out:
        json.dump(weights, out)


if __name__ == "__main__":
    main()

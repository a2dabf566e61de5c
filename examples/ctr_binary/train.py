"""A click-through-rate model trained on Horovod workers, with exact distributed ROC AUC.

Synthetic, imbalanced data (about 2% positives) stands in for click logs. Every worker
trains on its own shard with gradients averaged by Horovod, then evaluates its own shard
of the validation set; ROC AUC and average precision are reduced over all workers' data
with det-estimator's reducers, so they equal the single-machine values exactly. Rank 0
then checks that claim against scikit-learn on the whole validation set.

Run it on two workers (what ``make example`` does):

    .venv/bin/horovodrun -np 2 -H localhost:2 --gloo .venv/bin/python examples/ctr_binary/train.py
"""

import argparse
import os
import tempfile

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from sklearn.metrics import average_precision_score, roc_auc_score

from det_estimator.reducers import AveragePrecision, RocAuc, make_metric

NUM_FEATURES = 16
# With these feature weights an intercept of -6 gives about 2% positives.
INTERCEPT = -6.0


def synthetic_clicks(num_rows: int, seed: int):
    """Features and click labels from a fixed logistic ground truth with a non-linear term."""
    truth = np.random.default_rng(0)
    weights = truth.normal(0.0, 0.6, NUM_FEATURES)
    rng = np.random.default_rng(seed)
    features = rng.normal(0.0, 1.0, (num_rows, NUM_FEATURES)).astype(np.float32)
    logits = INTERCEPT + features @ weights + 0.5 * features[:, 0] * features[:, 1]
    labels = (rng.random(num_rows) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return features, labels


def model_fn(features, labels, mode, params):
    hidden = tf.compat.v1.layers.dense(features["x"], 32, activation=tf.nn.relu)
    hidden = tf.compat.v1.layers.dense(hidden, 16, activation=tf.nn.relu)
    logits = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1), axis=1)
    probabilities = tf.sigmoid(logits)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"probability": probabilities})

    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    if mode == tf.estimator.ModeKeys.TRAIN:
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer(params["learning_rate"]))
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    scored = {"labels": labels, "predictions": probabilities}
    metrics = {
        "auc": make_metric(scored, RocAuc(), np.float64),
        "average_precision": make_metric(scored, AveragePrecision(), np.float64),
    }
    return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)


def sharded_input_fn(features, labels, batch_size: int, train: bool):
    def input_fn():
        dataset = tf.data.Dataset.from_tensor_slices(({"x": features}, labels))
        dataset = dataset.shard(hvd.size(), hvd.rank())  # round-robin: rank r gets rows r, r+N, ...
        if train:
            dataset = dataset.shuffle(10_000, seed=hvd.rank()).repeat()
        return dataset.batch(batch_size)

    return input_fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-rows", type=int, default=200_000)
    parser.add_argument("--validation-rows", type=int, default=50_000)
    parser.add_argument("--steps", type=int, default=1_500, help="training batches per worker")
    parser.add_argument("--batch-size", type=int, default=256, help="per worker")
    parser.add_argument("--model-dir", default=None)
    args = parser.parse_args()

    hvd.init()
    train_x, train_y = synthetic_clicks(args.train_rows, seed=1)
    valid_x, valid_y = synthetic_clicks(args.validation_rows, seed=2)
    model_dir = args.model_dir or tempfile.mkdtemp(prefix="ctr_binary_")
    session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    estimator = tf.estimator.Estimator(
        model_fn,
        # Only rank 0 keeps checkpoints; the others write to their own scratch directories.
        model_dir=model_dir if hvd.rank() == 0 else os.path.join(model_dir, f"rank{hvd.rank()}"),
        config=tf.estimator.RunConfig(session_config=session_config, log_step_count_steps=500),
        params={"learning_rate": 1e-3},
    )

    estimator.train(
        sharded_input_fn(train_x, train_y, args.batch_size, train=True),
        steps=args.steps,
        hooks=[hvd.BroadcastGlobalVariablesHook(0)],
    )
    metrics = estimator.evaluate(sharded_input_fn(valid_x, valid_y, 1024, train=False))
    print(f"[rank {hvd.rank()}] exact AUC over all workers' data: {metrics['auc']:.6f}", flush=True)

    if hvd.rank() == 0:
        single_input = tf.compat.v1.estimator.inputs.numpy_input_fn({"x": valid_x}, shuffle=False, batch_size=4096)
        scores = np.array([p["probability"] for p in estimator.predict(single_input)])
        print(f"validation rows: {len(valid_y)}, positives: {valid_y.mean():.2%}")
        print(
            f"ROC AUC            distributed {metrics['auc']:.12f}   scikit-learn {roc_auc_score(valid_y, scores):.12f}"
        )
        print(
            f"average precision  distributed {metrics['average_precision']:.12f}   "
            f"scikit-learn {average_precision_score(valid_y, scores):.12f}"
        )
        print(f"checkpoints in {model_dir}")


if __name__ == "__main__":
    main()

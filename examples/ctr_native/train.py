"""The click-through-rate model of examples/ctr_binary, as a native-API script.

The script keeps building its own Estimator; ``det.init()`` gives it the harness:

    .venv/bin/python examples/ctr_native/train.py --local --test    # one batch here, to check a change
    .venv/bin/python examples/ctr_native/train.py --local           # trains in this process
    .venv/bin/python examples/ctr_native/train.py                   # a tracked experiment (const.yaml: 1 process)
    .venv/bin/python examples/ctr_native/train.py --config examples/ctr_native/distributed.yaml   # 2 processes

Either way the run is recorded in the experiment store, where ``det-estimator experiment
list`` shows it. With ``--local`` it trains in this process and resumes from its latest
checkpoint when run again; without, it is a tracked experiment on the config's slots,
and ``experiment pause`` / ``resume`` work on it.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf
import yaml

HERE = Path(__file__).resolve().parent
# The data generator is example 1's, so that both examples train on the same clicks.
sys.path.insert(0, str(HERE.parent / "ctr_binary"))

from model_def import NUM_FEATURES, synthetic_clicks  # noqa: E402

import det_estimator as det  # noqa: E402
from det_estimator.reducers import AveragePrecision, LogLoss, RocAuc  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(HERE / "const.yaml"), help="experiment config (YAML)")
    parser.add_argument("--local", action="store_true", help="train in this process (recorded in the store too)")
    parser.add_argument("--test", action="store_true", help="one training batch, one validation step, one checkpoint")
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text(encoding="utf-8"))

    # Without --local this call records the experiment, runs this script on every slot
    # and exits; on those slots it returns the context of each rank.
    context = det.init(config, local=args.local, test=args.test, context_dir=str(HERE))

    data = config["data"]
    train_features, train_labels = synthetic_clicks(data["train_rows"], seed=1)
    validation_features, validation_labels = synthetic_clicks(data["validation_rows"], seed=2)
    optimizer = context.wrap_optimizer(tf.compat.v1.train.AdamOptimizer(context.get_hparam("learning_rate")))
    hidden_units = context.get_hparam("hidden_units")
    make_metric = context.experimental.make_metric

    def model_fn(features, labels, mode):
        hidden = features["x"]
        for units in hidden_units:
            hidden = tf.compat.v1.layers.dense(hidden, units, activation=tf.nn.relu)
        logits = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1), axis=1)
        probability = tf.sigmoid(logits)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"probability": probability})
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        scored = {"labels": labels, "predictions": probability}
        metrics = {
            "auc": make_metric(scored, RocAuc(), np.float64),
            "average_precision": make_metric(scored, AveragePrecision(), np.float64),
            "log_loss": make_metric(scored, LogLoss(), np.float64),
        }
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)

    def input_fn(features, labels, shuffle):
        def make_dataset():
            dataset = context.wrap_dataset(tf.data.Dataset.from_tensor_slices(({"x": features}, labels)))
            if shuffle:
                dataset = dataset.shuffle(10_000)
            return dataset.batch(context.get_per_slot_batch_size())

        return make_dataset

    def raw_features():
        x = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES], name="x")
        return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})

    outcome = context.train_and_evaluate(
        tf.estimator.Estimator(model_fn),
        tf.estimator.TrainSpec(input_fn(train_features, train_labels, shuffle=True)),
        tf.estimator.EvalSpec(input_fn(validation_features, validation_labels, shuffle=False), steps=None),
        serving_input_receiver_fns={"raw": raw_features},
    )
    if context.distributed.rank == 0:
        print(f"\n{outcome.state} after {outcome.batches_trained} batches")
        if outcome.validations:
            print(f"last validation: ROC AUC {outcome.validations[-1]['metrics']['auc']:.6f}")
        for checkpoint in outcome.checkpoints:
            print(f"checkpoint after {checkpoint['batches']} batches: {checkpoint['path']}")


if __name__ == "__main__":
    main()

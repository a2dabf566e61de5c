"""Iris categorisation with Keras' own model.fit and det.keras.DeterminedCallback, on 1 or N processes.

Launched by an experiment (`det-estimator experiment create const.yaml .`), the
TensorFlow launcher gives each process its TF_CONFIG; run by hand (`python3 train.py`),
it trains on one process and records an experiment of its own.
"""

import argparse
from pathlib import Path

import numpy as np
import tensorflow as tf
import yaml
from sklearn.datasets import load_iris

import det_estimator as det

NUM_CLASSES = 3  # setosa, versicolor, virginica
TRAINING_RECORDS = 120


def load_data() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The 150 flowers, shuffled once with a fixed seed: 120 to train on, 30 to validate on (one-hot labels)."""
    features, labels = load_iris(return_X_y=True)
    order = np.random.default_rng(1).permutation(len(labels))
    features = features[order].astype(np.float32)
    one_hot = tf.keras.utils.to_categorical(labels[order], NUM_CLASSES).astype(np.float32)
    split = TRAINING_RECORDS
    return (features[:split], one_hot[:split]), (features[split:], one_hot[split:])


def as_dataset(x: np.ndarray, y: np.ndarray, global_batch_size: int) -> tf.data.Dataset:
    """Global batches in a fixed order; on several workers each reads its share of every batch."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size).with_options(options)


def build_model(hparams: dict) -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(hparams["layer1_dense_size"], activation="relu", input_shape=(4,)),
            tf.keras.layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.RMSprop(learning_rate=hparams["learning_rate"]),
        loss="categorical_crossentropy",
        metrics=[tf.keras.metrics.CategoricalAccuracy()],
    )
    return model


def main(core_context: det.core.Context, strategy: tf.distribute.Strategy, test: bool) -> None:
    info = det.get_cluster_info()
    hparams = info.trial.hparams
    searcher = info.trial.config["searcher"]
    epochs = 1 if test or info.test_mode else searcher["max_length"]["epochs"]
    (train_x, train_y), (test_x, test_y) = load_data()
    batch_size = hparams["global_batch_size"]

    # The trial's seed makes the initial weights the same on any number of processes.
    tf.keras.utils.set_random_seed(info.trial.trial_seed % 2**31)
    with strategy.scope():
        model = build_model(hparams)

    det_callback = det.keras.DeterminedCallback(
        core_context,
        checkpoint=info.latest_checkpoint,
        continue_id=info.trial.trial_id,
        report_every_batches=20,
        checkpoint_every_epochs=10,  # epochs of 4 batches: a checkpoint every 40
    )
    tensorboard = det.keras.TensorBoard(core_context, update_freq="epoch")
    model.fit(
        as_dataset(train_x, train_y, batch_size),
        epochs=epochs,
        steps_per_epoch=1 if test or info.test_mode else None,
        validation_data=as_dataset(test_x, test_y, batch_size),
        callbacks=[det_callback, tensorboard],
        verbose=0,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--test", action="store_true", help="one epoch of one batch, to check that it all runs")
    args = parser.parse_args()
    # Run by hand (no experiment), the script records one with const.yaml.
    config = yaml.safe_load((Path(__file__).parent / "const.yaml").read_text())
    distributed, strategy = det.core.DistributedContext.from_tf_config()
    with det.core.init(distributed=distributed, config=config) as core_context:
        main(core_context, strategy, args.test)

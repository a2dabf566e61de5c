"""A Keras script with DeterminedCallback, as the reference system's callback guide writes one.

Only its import line was changed. It trains a small regression network on fixed
synthetic data for the epochs of the experiment's searcher, on one process or under
TensorFlow's MultiWorkerMirroredStrategy (the TensorFlow launcher gives each its TF_CONFIG).
"""

import logging

import numpy as np
import tensorflow as tf

import det_estimator as det  # was: import determined as det

FEATURES = 4


def make_data(records: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(records, FEATURES)).astype(np.float32)
    y = (np.sin(x).sum(axis=1, keepdims=True) + 0.1 * rng.normal(size=(records, 1))).astype(np.float32)
    return x, y


def as_dataset(x: np.ndarray, y: np.ndarray, batch_size: int) -> tf.data.Dataset:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).with_options(options)


def build_model(hparams: dict) -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(hparams["hidden_units"], activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(1),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(learning_rate=hparams["learning_rate"], momentum=0.9)
    model.compile(optimizer=optimizer, loss="mse", metrics=[tf.keras.metrics.MeanAbsoluteError(name="mae")])
    return model


def main(core_context: det.core.Context, strategy: tf.distribute.Strategy) -> None:
    info = det.get_cluster_info()
    assert info is not None, "this script runs as an experiment's trial"
    hparams = info.trial.hparams
    epochs = info.trial.config["searcher"]["max_length"]["epochs"]
    tf.keras.utils.set_random_seed(info.trial.trial_seed % 2**31)
    with strategy.scope():
        model = build_model(hparams)
    det_callback = det.keras.DeterminedCallback(
        core_context,
        checkpoint=info.latest_checkpoint,
        continue_id=info.trial.trial_id,
        train_metrics_report_period=4,
        checkpoint_epochs=1,
    )
    logging.info("training for %d epochs", epochs)
    model.fit(
        as_dataset(*make_data(64, seed=0), hparams["global_batch_size"]),
        epochs=epochs,
        validation_data=as_dataset(*make_data(32, seed=1), hparams["global_batch_size"]),
        callbacks=[det_callback],
        verbose=0,
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    distributed, strategy = det.core.DistributedContext.from_tf_config()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, strategy)

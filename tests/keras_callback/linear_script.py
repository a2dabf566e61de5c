"""Linear regression trained by model.fit with DeterminedCallback, on one process or under the TensorFlow launcher.

Settings come from the environment, so that the same script serves every test:
``LINEAR_EPOCHS`` (4), ``LINEAR_OUT`` (the chief writes the final weights there as .npy),
``LINEAR_KILL_AT`` (a process SIGKILLs itself after that many batches in all, once:
``LINEAR_KILL_MARKER`` records that it did), ``LINEAR_KILL_RANK`` (1), ``LINEAR_CHECKPOINT``
and ``LINEAR_CONTINUE_ID`` (override the cluster info's), ``LINEAR_SLEEP`` (seconds per batch),
``LINEAR_CHECKPOINT_BATCHES`` (checkpoint every that many batches), ``LINEAR_STEPS_PER_EXECUTION``
(compile's ``steps_per_execution``, 1).
"""

import os
import signal
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_estimator as det

RECORDS, FEATURES, GLOBAL_BATCH = 64, 3, 8


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(RECORDS, FEATURES)).astype(np.float32)
    y = (x @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.25).astype(np.float32)
    return x, y


def dataset(rank: int, size: int) -> tf.data.Dataset:
    """The data in global batches, in a fixed order; on several workers each reads its share of every batch.

    A tf.distribute strategy splits each global batch among its workers (the DATA policy):
    the steps are those of one process reading the same batches.
    """
    x, y = data()
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.with_options(options)


def build_model(hvd=None) -> tf.keras.Model:
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="zeros", input_shape=(FEATURES,))])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
    model.compile(
        optimizer=optimizer if hvd is None else hvd.DistributedOptimizer(optimizer),
        loss="mse",
        steps_per_execution=int(os.environ.get("LINEAR_STEPS_PER_EXECUTION", "1")),
    )
    return model


class Saboteur(tf.keras.callbacks.Callback):
    """Kills this process after a given number of batches, once (a crash at a chosen batch)."""

    def __init__(self, kill_at: int, marker: Path) -> None:
        super().__init__()
        self.kill_at, self.marker, self.batches = kill_at, marker, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        total = self.epoch * (RECORDS // GLOBAL_BATCH) + batch + 1
        if total == self.kill_at and not self.marker.exists():
            self.marker.write_text(str(total))
            os.kill(os.getpid(), signal.SIGKILL)


class Slow(tf.keras.callbacks.Callback):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


def main(core_context, strategy) -> None:
    env = os.environ
    rank, size = core_context.distributed.rank, core_context.distributed.size
    info = det.get_cluster_info()
    checkpoint = env.get("LINEAR_CHECKPOINT", info.latest_checkpoint if info else None) or None
    continue_id = env.get("LINEAR_CONTINUE_ID", info.trial.trial_id if info else None)
    with strategy.scope():
        model = build_model(getattr(strategy, "hvd", None))
    callbacks = [
        det.keras.DeterminedCallback(
            core_context,
            checkpoint=checkpoint,
            continue_id=continue_id,
            report_every_batches=4,
            checkpoint_every_batches=int(env["LINEAR_CHECKPOINT_BATCHES"])
            if "LINEAR_CHECKPOINT_BATCHES" in env
            else None,
            check_preempt_every_batches=2,
        )
    ]
    if "LINEAR_KILL_AT" in env and rank == int(env.get("LINEAR_KILL_RANK", "1")) % size:
        callbacks.append(Saboteur(int(env["LINEAR_KILL_AT"]), Path(env["LINEAR_KILL_MARKER"])))
    if "LINEAR_SLEEP" in env:
        callbacks.append(Slow(float(env["LINEAR_SLEEP"])))
    if hasattr(strategy, "hvd"):
        # Horovod: each process reads its share of every global batch; gradients are averaged.
        shares = tuple(array[rank::size] for array in data())
        training = tf.data.Dataset.from_tensor_slices(shares).batch(GLOBAL_BATCH // size)
        callbacks.insert(0, strategy.hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    else:
        training = dataset(rank, size)
    validation = dataset(rank, size)
    model.fit(
        training,
        epochs=int(env.get("LINEAR_EPOCHS", "4")),
        validation_data=validation,
        callbacks=callbacks,
        verbose=0,
    )
    if rank == 0 and "LINEAR_OUT" in env:
        np.save(env["LINEAR_OUT"], np.concatenate([w.numpy().ravel() for w in model.weights]))


class HorovodStrategy:
    """Stands for a tf.distribute strategy in main() under Horovod: the default scope, and Horovod's optimizer."""

    def __init__(self, hvd) -> None:
        self.hvd = hvd

    def scope(self):
        return tf.distribute.get_strategy().scope()


if __name__ == "__main__":
    if os.environ.get("LINEAR_ENGINE") == "horovod":
        import horovod.tensorflow.keras as hvd

        hvd.init()
        distributed, strategy = det.core.DistributedContext.from_horovod(hvd), HorovodStrategy(hvd)
    else:
        distributed, strategy = det.core.DistributedContext.from_tf_config()
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, strategy)

"""The uneven split's model trained by a script: ``callback`` (DeterminedCallback in model.fit) or ``keras_api``.

Both run under either launcher: under horovodrun (``HOROVOD_SIZE`` is set) with Horovod
initialized, else with the ``MultiWorkerMirroredStrategy`` of its ``TF_CONFIG`` (which
``det.keras.init()`` joins itself).
Every process validates on its own share of :mod:`uneven_split`'s validation set.
"""

import os
import sys

import tensorflow as tf
from uneven_split import BATCH_SIZE, build_model, share, training_data

import det_estimator as det


def with_callback() -> None:
    if "HOROVOD_SIZE" in os.environ:
        import horovod.tensorflow.keras as hvd

        hvd.init()  # the ReducerMetric exchanges its state through Horovod
        distributed, strategy = det.core.DistributedContext.from_horovod(hvd), tf.distribute.get_strategy()
    else:
        distributed, strategy = det.core.DistributedContext.from_tf_config()
    with det.core.init(distributed=distributed) as core_context:
        with strategy.scope():
            model = build_model()  # a learning rate of 0: no gradient to average
        x, y = training_data()
        rank, size = distributed.rank, distributed.size
        validation = share(rank)
        if strategy.num_replicas_in_sync > 1:
            # Each worker reads its own data as it is, in global batches of BATCH_SIZE per worker.
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
            training = tf.data.Dataset.from_tensor_slices((x[rank::size], y[rank::size]))
            training = training.batch(BATCH_SIZE * size).with_options(options)
            validation = tf.data.Dataset.from_tensor_slices(validation).batch(BATCH_SIZE * size).with_options(options)
            # Of unknown length, so that the workers evaluate together until all of them are done with
            # their shares of different lengths (Keras would otherwise take each worker's own length).
            validation = validation.filter(lambda *_: True)
            model.fit(training, validation_data=validation, callbacks=[det.keras.DeterminedCallback(core_context)])
        else:
            model.fit(
                x[rank::size],
                y[rank::size],
                batch_size=BATCH_SIZE,
                validation_data=validation,
                callbacks=[det.keras.DeterminedCallback(core_context)],
                verbose=0,
            )


def with_keras_api() -> None:
    with det.keras.init() as context:
        model = build_model(context.wrap_optimizer)
        x, y = context.wrap_data(*training_data())
        context.fit(
            model,
            x,
            y,
            batch_size=BATCH_SIZE,
            validation_data=share(context.distributed.rank),
            shuffle=False,
            verbose=0,
        )


if __name__ == "__main__":
    {"callback": with_callback, "keras_api": with_keras_api}[sys.argv[1]]()

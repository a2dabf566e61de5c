"""A Core API script on Horovod whose rank 1 runs out of training data early, for the hang tests.

Rank 0 has data for ``data.batches`` batches and rank 1 for 3: after its third batch,
rank 1 goes on to gather the ranks' validation metrics while rank 0 waits in Horovod for
its fourth gradient. Neither ever returns, as in any job whose ranks' data differ.
"""

import horovod.tensorflow as hvd
import tensorflow as tf

import det_estimator as det


def main() -> None:
    hvd.init()
    distributed = det.core.DistributedContext.from_horovod(hvd)
    with det.core.init(distributed=distributed) as core_context:
        batches = 3 if distributed.rank == 1 else int(det.get_cluster_info().user_data["batches"])
        for batch in range(1, batches + 1):
            hvd.allreduce(tf.constant(1.0), name="gradient")  # waits here: rank 0
            core_context.train.report_training_metrics(batch, {"loss": 1.0 / batch})
        core_context.distributed.allgather({"loss": 1.0})  # waits here: rank 1


if __name__ == "__main__":
    main()

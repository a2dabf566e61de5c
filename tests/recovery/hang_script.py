"""A Core API script on Horovod whose rank 1 stops taking part early, for the hang tests.

Rank 0 has data for ``data.batches`` batches and rank 1 for 3. With ``data.stuck:
collective`` rank 1's data runs out: it goes on to gather the ranks' validation metrics
while rank 0 waits in Horovod for its fourth gradient. Neither ever returns, as in any
job whose ranks' data differ. With ``data.stuck: interpreter_lock`` rank 1 instead
matches a regular expression that takes for ever, holding Python's interpreter lock all
along, so that none of its other threads runs.
"""

import re

import horovod.tensorflow as hvd
import tensorflow as tf

import det_estimator as det


def main() -> None:
    hvd.init()
    distributed = det.core.DistributedContext.from_horovod(hvd)
    settings = det.get_cluster_info().user_data
    with det.core.init(distributed=distributed) as core_context:
        batches = 3 if distributed.rank == 1 else int(settings["batches"])
        for batch in range(1, batches + 1):
            hvd.allreduce(tf.constant(1.0), name="gradient")  # waits here: rank 0
            core_context.train.report_training_metrics(batch, {"loss": 1.0 / batch})
        if settings["stuck"] == "interpreter_lock":
            re.match(r"(a+)+$", "a" * 64 + "b")  # holds the lock here: rank 1
        core_context.distributed.allgather({"loss": 1.0})  # waits here: rank 1


if __name__ == "__main__":
    main()

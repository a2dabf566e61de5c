"""Exercises DistributedContext and the Estimator wrappers on every rank of a Horovod job.

Each rank writes ``rank<N>.json`` with what each call returned there.
"""

import argparse
import json
import os

import tensorflow as tf

import det_estimator as det
from det_estimator import _horovod


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()

    _horovod.init()
    distributed = det.DistributedContext.from_horovod()
    rank = distributed.rank
    report = {
        "ranks": [distributed.rank, distributed.size, distributed.local_rank, distributed.local_size],
        "machines": [distributed.cross_rank, distributed.get_num_agents()],
        "allgather": distributed.allgather({"rank": rank}),
        "allgather_local": distributed.allgather_local(rank * 10),
        "gather": distributed.gather(f"from {rank}"),
        "gather_local": distributed.gather_local(rank),
        "broadcast": distributed.broadcast(f"chief says {rank}"),
        "broadcast_local": distributed.broadcast_local([rank]),
    }

    context = det.EstimatorContext(distributed, aggregation_frequency=2)
    report["sharded"] = [int(x) for x in context.wrap_dataset(tf.data.Dataset.range(7)).as_numpy_iterator()]
    report["unsharded"] = [
        int(x) for x in context.wrap_dataset(tf.data.Dataset.range(3), shard_dataset=False).as_numpy_iterator()
    ]
    optimizer = context.wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    report["optimizer"] = type(optimizer).__name__
    # Horovod keeps a gradient aggregation helper only when backward_passes_per_step > 1.
    report["aggregates_gradients"] = getattr(optimizer, "_agg_helper", None) is not None
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()

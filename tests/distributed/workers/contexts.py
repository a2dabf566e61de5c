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

    # Both ranks share this machine's dataset cache, as processes of one job do.
    os.environ["XDG_CACHE_HOME"] = os.path.join(args.output_dir, "cache")
    distributed = det.core.DistributedContext.from_horovod(_horovod.init())
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
    builds = []

    @context.experimental.cache_train_dataset("numbers", "v1")
    def make_numbers():
        builds.append(rank)
        return tf.data.Dataset.range(7)

    with tf.Graph().as_default():  # as inside an input_fn
        element = tf.compat.v1.data.make_one_shot_iterator(make_numbers()).get_next()
        with tf.compat.v1.Session() as session:
            report["cached"] = [int(session.run(element)) for _ in range(7 // 2 + (rank == 0))]
    report["cache_builds"] = builds
    optimizer = context.wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    report["optimizer"] = type(optimizer).__name__
    # Horovod keeps a gradient aggregation helper only when backward_passes_per_step > 1.
    report["aggregates_gradients"] = getattr(optimizer, "_agg_helper", None) is not None
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()

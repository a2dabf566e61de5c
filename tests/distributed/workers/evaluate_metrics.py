"""Evaluates a tf.estimator model with many make_metric metrics, twice in a row.

Run as plain ``python`` it is one process and never touches Horovod; under ``horovodrun``
every rank evaluates its round-robin shard of the same data. Each rank writes
``rank<N>.json`` with the metrics of both evaluations, or the error evaluate raised.

The data is a pure function of ``--records`` (see :func:`make_data`), so the test can
compute every expected value with NumPy and scikit-learn.
"""

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np
import tensorflow as tf

from det_estimator import _horovod
from det_estimator.reducers import AveragePrecision, BinnedRocAuc, MetricReducer, RocAuc, make_metric

GLOBAL_BATCH_SIZE = 16


def make_data(num_records: int):
    """Values with a known total, binary labels and scores with many ties."""
    rng = np.random.default_rng(num_records)
    values = np.arange(num_records, dtype=np.float64)
    labels = (rng.random(num_records) < 0.3).astype(np.int64)
    scores = np.round(rng.random(num_records) * 0.5 + 0.3 * labels, 1).astype(np.float32)
    return values, labels, scores


class DictSum(MetricReducer):
    """A class reducer over a dict metric; one instance is shared by every evaluation."""

    def __init__(self):
        self.total = 0.0

    def accumulate(self, metric):
        self.total += float(np.sum(metric["value"]) + np.sum(metric["double"]))
        return self.total

    def cross_slot_reduce(self, per_slot_metrics):
        return sum(per_slot_metrics)


class FailOnRank(MetricReducer):
    def __init__(self, bad_rank: int):
        self.bad_rank = bad_rank

    def accumulate(self, metric):
        if _horovod.rank() == self.bad_rank:
            raise RuntimeError(f"broken reducer on rank {self.bad_rank}")
        return 0

    def cross_slot_reduce(self, per_slot_metrics):
        return 0.0


SHARED_DICT_SUM = DictSum()


def position_weighted_sum(batches):
    """Depends on the order of the records, not just on which records were seen."""
    values = np.concatenate(batches)
    return float(np.sum(values * np.arange(1, len(values) + 1)))


def eval_metrics(features, scenario: str):
    value = features["value"]
    scored = {"labels": features["label"], "predictions": features["score"]}
    if scenario == "failing":
        return {"broken": make_metric(value, FailOnRank(bad_rank=1), np.float64, name="broken")}
    return {
        "sum_fn_tensor": make_metric(value, lambda batches: np.sum(np.concatenate(batches)), np.float64),
        "sum_fn_list": make_metric(
            [value, 2 * value], lambda batches: sum(np.sum(v) + np.sum(d) for v, d in batches), np.float64
        ),
        "sum_cls_dict": make_metric({"value": value, "double": 2 * value}, SHARED_DICT_SUM, np.float64),
        "count": make_metric(value, lambda batches: sum(len(b) for b in batches), np.int64),
        "ordered": make_metric(value, position_weighted_sum, np.float64),
        "auc": make_metric(scored, RocAuc(), np.float64),
        "binned_auc": make_metric(scored, BinnedRocAuc(), np.float64),
        "binned_auc_error_bound": make_metric(scored, BinnedRocAuc(value="error_bound"), np.float64),
        # Three cells per rank: merged cells of different ranks overlap.
        "binned_auc_3_cells": make_metric(scored, BinnedRocAuc(bins=3), np.float64),
        "binned_auc_3_cells_bound": make_metric(scored, BinnedRocAuc(bins=3, value="error_bound"), np.float64),
        "average_precision": make_metric(scored, AveragePrecision(), np.float64),
    }


def model_fn(features, labels, mode, params):
    weight = tf.compat.v1.get_variable("w", shape=[], initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(weight * tf.cast(features["value"], tf.float32)))
    if params["slow"]:
        # This rank finishes its batches later than the others do.
        slow = tf.compat.v1.py_func(lambda: time.sleep(0.05) or np.float32(0), [], tf.float32)
        loss = loss + slow
    if mode == tf.estimator.ModeKeys.TRAIN:  # one step, only so that a checkpoint exists
        train_op = tf.compat.v1.assign_add(tf.compat.v1.train.get_global_step(), 1)
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
    return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=eval_metrics(features, params["scenario"]))


def input_fn_for(args, rank: int, size: int):
    values, labels, scores = make_data(args.records)
    if args.split == "round_robin":
        selected = np.arange(rank, args.records, size)
    else:  # "all_on_rank0": the other ranks see no batch at all
        selected = np.arange(args.records) if rank == 0 else np.arange(0)

    def input_fn():
        features = {"value": values[selected], "label": labels[selected], "score": scores[selected]}
        return tf.data.Dataset.from_tensor_slices(features).batch(GLOBAL_BATCH_SIZE // size)

    return input_fn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--records", type=int, default=1001)
    parser.add_argument("--split", choices=["round_robin", "all_on_rank0"], default="round_robin")
    parser.add_argument("--scenario", choices=["metrics", "failing"], default="metrics")
    parser.add_argument("--slow-rank", type=int, default=-1)
    args = parser.parse_args()

    if "HOROVOD_RANK" in os.environ:
        _horovod.init()
    rank, size = _horovod.rank(), _horovod.size()
    session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    estimator = tf.estimator.Estimator(
        model_fn,
        model_dir=os.path.join(args.output_dir, f"model_rank{rank}"),
        config=tf.estimator.RunConfig(session_config=session_config),
        params={"scenario": args.scenario, "slow": rank == args.slow_rank},
    )
    report = {"rank": rank, "size": size, "horovod_loaded": "horovod.tensorflow" in sys.modules}
    estimator.train(lambda: tf.data.Dataset.from_tensors({"value": [0.0]}).repeat(), steps=1)
    try:
        evaluations = [estimator.evaluate(input_fn_for(args, rank, size)) for _ in range(2)]
        report["evaluations"] = [{k: float(v) for k, v in metrics.items()} for metrics in evaluations]
    except Exception:
        report["error"] = traceback.format_exc()
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()

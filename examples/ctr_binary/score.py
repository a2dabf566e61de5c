"""Batch inference: scores new rows with the SavedModel of a checkpoint.

Usage::

    .venv/bin/python examples/ctr_binary/score.py CHECKPOINT_DIR [--rows N]
    .venv/bin/python examples/ctr_binary/score.py --experiment ID [--store PATH] [--rows N]

With ``--experiment`` (an id, or ``latest``) the checkpoint is the experiment's best by
its searcher metric, looked up in the experiment store.
"""

import argparse
import os
import sys
from pathlib import Path

# TensorFlow's start-up notices (oneDNN, CPU instructions) say nothing about the scores.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_def import synthetic_clicks  # noqa: E402

import det_estimator as det  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", help="a checkpoint directory, as train.py prints")
    parser.add_argument("--experiment", help="score with this experiment's best checkpoint: an id, or latest")
    parser.add_argument("--store", help="the experiment store (default: as the det-estimator command)")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    if (args.checkpoint is None) == (args.experiment is None):
        parser.error("give a CHECKPOINT directory or --experiment, not both")
    checkpoint = args.checkpoint or best_checkpoint(args.store, args.experiment)

    model = det.estimator.load_estimator_from_checkpoint_path(checkpoint, serving_name="raw")
    score = model.signatures["serving_default"]
    features, labels = synthetic_clicks(args.rows, seed=3)  # rows the model never saw
    probabilities = np.concatenate(
        [score(x=tf.constant(batch))["probability"].numpy() for batch in np.array_split(features, 10)]
    )
    top = np.argsort(-probabilities)[: len(probabilities) // 100]
    print(f"scored {len(probabilities)} rows; mean predicted click rate {probabilities.mean():.4f}")
    print(f"click rate among the top 1% by score: {labels[top].mean():.4f} (overall {labels.mean():.4f})")


def best_checkpoint(store_path, experiment: str) -> str:
    """The kept checkpoint of the experiment with the best value of its searcher metric."""
    from det_estimator.store import ExperimentStore

    with ExperimentStore(store_path) as store:
        record = store.experiments()[-1] if experiment == "latest" else store.experiment(int(experiment))
        validated = [c for c in store.checkpoints(record.id) if c.validation_metrics]
        sign = 1 if record.smaller_is_better else -1
        best = min(validated, key=lambda c: sign * c.validation_metrics[record.searcher_metric])
    print(f"experiment {record.id}: best checkpoint {best.uuid} (after {best.batches} batches)")
    return best.path


if __name__ == "__main__":
    main()

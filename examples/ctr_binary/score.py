"""Batch inference: scores new rows with the SavedModel of a checkpoint.

Usage: ``.venv/bin/python examples/ctr_binary/score.py CHECKPOINT_DIR [--rows N]``
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_def import synthetic_clicks  # noqa: E402

import det_estimator as det  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a checkpoint directory printed by train.py")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()

    model = det.load_estimator_from_checkpoint_path(args.checkpoint, serving_name="raw")
    score = model.signatures["serving_default"]
    features, labels = synthetic_clicks(args.rows, seed=3)  # rows the model never saw
    probabilities = np.concatenate(
        [score(x=tf.constant(batch))["probability"].numpy() for batch in np.array_split(features, 10)]
    )
    top = np.argsort(-probabilities)[: len(probabilities) // 100]
    print(f"scored {len(probabilities)} rows; mean predicted click rate {probabilities.mean():.4f}")
    print(f"click rate among the top 1% by score: {labels[top].mean():.4f} (overall {labels.mean():.4f})")


if __name__ == "__main__":
    main()

"""Scores new click logs with the model of a checkpoint of the Keras trial.

Usage: python score.py CHECKPOINT_DIR [--rows N]
"""

import argparse
import time

import numpy as np
from model_def import synthetic_clicks
from sklearn.metrics import roc_auc_score

import det_estimator as det


def main() -> None:
    parser = argparse.ArgumentParser(description="Scores rows with a checkpoint's model.")
    parser.add_argument("checkpoint", help="a checkpoint directory (det-estimator checkpoint list <id>)")
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()

    try:
        model = det.keras.load_model_from_checkpoint_path(args.checkpoint)
    except (OSError, ValueError) as error:  # no such directory, or not a checkpoint of a Keras trial
        parser.error(str(error))
    features, labels = synthetic_clicks(args.rows, seed=3)
    started = time.perf_counter()
    probabilities = model.predict(features, batch_size=4096, verbose=0).ravel()
    seconds = time.perf_counter() - started
    print(f"scored {args.rows} rows in {seconds:.2f} s; mean click probability {np.mean(probabilities):.4f}")
    if 0 < labels.sum() < len(labels):
        print(f"ROC AUC on these rows: {roc_auc_score(labels, probabilities):.4f}")


if __name__ == "__main__":
    main()

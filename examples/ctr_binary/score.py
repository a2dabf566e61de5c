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
        parser.error("give either a CHECKPOINT directory or --experiment ID (or latest), one of the two")
    try:
        checkpoint = args.checkpoint or best_checkpoint(args.store, args.experiment)
    except LookupError as error:
        parser.error(str(error))

    try:
        model = det.estimator.load_estimator_from_checkpoint_path(checkpoint, serving_name="raw")
    except (OSError, ValueError) as error:  # no such directory, not a checkpoint of this trial, no "raw" export
        parser.error(str(error))
    score = model.signatures["serving_default"]
    features, labels = synthetic_clicks(args.rows, seed=3)  # rows the model never saw
    probabilities = np.concatenate(
        [score(x=tf.constant(batch))["probability"].numpy() for batch in np.array_split(features, 10)]
    )
    top = np.argsort(-probabilities)[: len(probabilities) // 100]
    print(f"scored {len(probabilities)} rows; mean predicted click rate {probabilities.mean():.4f}")
    print(f"click rate among the top 1% by score: {labels[top].mean():.4f} (overall {labels.mean():.4f})")


def best_checkpoint(store_path, experiment: str) -> str:
    """The kept checkpoint of the experiment with the best value of its searcher metric.

    Raises:
        LookupError: saying why there is none: no store, no such experiment, no checkpoint
            with a validation of the searcher metric.
    """
    from det_estimator.store import ExperimentStore, UnknownIdError, default_store_path

    path = Path(store_path) if store_path else default_store_path()
    if not path.is_file():  # opening it would make an empty store there
        raise LookupError(f"there is no experiment store at {path}; name one with --store")
    if experiment != "latest" and not experiment.isdigit():
        raise LookupError(f"--experiment {experiment}: expected an experiment id or latest")
    with ExperimentStore(path) as store:
        experiments = store.experiments()
        if not experiments:
            raise LookupError(f"the store {path} holds no experiment yet")
        try:
            record = experiments[-1] if experiment == "latest" else store.experiment(int(experiment))
        except UnknownIdError as error:
            raise LookupError(str(error)) from None
        metric = record.searcher_metric
        # Ranked as save_experiment_best ranks them (the later of equal values first).
        best_uuids = store.best_checkpoints(record.id, metric, record.smaller_is_better, 1)
        if not best_uuids:
            raise LookupError(
                f"experiment {record.id} has no kept checkpoint with a validation of {metric} yet "
                f"(it is {record.state}); score a CHECKPOINT directory instead"
            )
        best = store.checkpoint(best_uuids.pop())
    print(f"experiment {record.id}: best checkpoint {best.uuid} (after {best.batches} batches)")
    return best.path


if __name__ == "__main__":
    main()

"""The metrics each front door reports for one uneven split over 2 processes, beside one process's on all the data.

One fixed logistic regression (``tests/support/uneven_split.py``) is validated on 100
records split 70/30 over 2 processes, through every front door that trains Keras: a
``TFKerasTrial``, ``DeterminedCallback`` under the Horovod launcher and under the
TensorFlow launcher (``MultiWorkerMirroredStrategy``), and ``det.keras.init()``'s
``context.fit``, each run by ``det-estimator experiment create``. Prints, for accuracy,
the loss, Keras' binned ``AUC`` and ``ReducerMetric(RocAuc())``, the value one process
gets on all 100 records, the value each front door recorded, and (for contrast) the
mean of the two processes' own values, which is what averaging per process reports;
then the largest difference of any front door from one process.

Usage: ``.venv/bin/python benchmarks/metric_policy.py [--only "TFKerasTrial"]``
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))

import uneven_split  # noqa: E402

from det_estimator import launcher  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description="Prints each front door's metrics of one uneven split.")
    parser.add_argument("--only", action="append", choices=list(uneven_split.FRONT_DOORS), help="a front door")
    args = parser.parse_args()
    # Where Horovod is installed the trial's worker runs under horovodrun: its TensorFlow door would be the same.
    without_horovod = () if launcher.horovod_installed() else uneven_split.WITHOUT_HOROVOD_FRONT_DOORS
    front_doors = args.only or [
        door
        for door in uneven_split.FRONT_DOORS
        if door not in uneven_split.WITHOUT_HOROVOD_FRONT_DOORS or door in without_horovod
    ]

    columns = {"one process, all data": uneven_split.whole_set()}
    with tempfile.TemporaryDirectory(prefix="det-metric-policy-") as scratch:
        for index, front_door in enumerate(front_doors):
            print(f"running {front_door} on 2 processes ...", flush=True)
            columns[front_door] = uneven_split.run_front_door(front_door, Path(scratch) / str(index))
    columns["mean of the 2 processes' own values"] = uneven_split.mean_of_shares()

    width = max(len(name) for name in columns)
    print()
    print(f"{'':{width}}  " + "  ".join(f"{metric:>10}" for metric in uneven_split.METRICS))
    for name, values in columns.items():
        print(f"{name:{width}}  " + "  ".join(f"{values[metric]:10.6f}" for metric in uneven_split.METRICS))
    whole = columns["one process, all data"]
    largest = max(abs(columns[door][metric] - whole[metric]) for door in front_doors for metric in uneven_split.METRICS)
    print(f"\nlargest difference of a front door from one process: {largest:.2e}")


if __name__ == "__main__":
    main()

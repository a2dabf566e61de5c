"""One model and one validation set split 70/30 over two processes, for every front door that trains Keras.

The model is a fixed logistic regression (its weights are constants and it trains with a
learning rate of 0), so the validation metrics any front door records after training are
those of this model on the validation data. Process 0 validates on the first 70
records, process 1 on the last 30, and the two shares differ (the second has far more
positives), so that an average of the shares' values is visibly not the value of the
whole set.

The front doors (each a :data:`FRONT_DOORS` entry: an experiment config's entrypoint
and searcher) are the trial class :class:`UnevenSplitTrial` (under Horovod, and under the
TensorFlow launcher where Horovod is not installed), and ``uneven_split_script.py``
run as a DeterminedCallback script under the Horovod and the TensorFlow launchers and
as a ``det.keras.init()`` script under both launchers (under the TensorFlow launcher
with Keras 3 and with tf-keras).
"""

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import yaml

import det_estimator as det
from det_estimator.reducers import RocAuc
from det_estimator.store import ExperimentStore, MetricKind

SUPPORT = Path(__file__).parent
COMMAND = str(Path(sys.executable).with_name("det-estimator"))
VALIDATION_RECORDS = 100
SHARES = (slice(0, 70), slice(70, 100))  # process 0's and process 1's validation records
TRAINING_RECORDS = 40
BATCH_SIZE = 10  # per process
METRICS = ("loss", "accuracy", "auc", "roc_auc")

_WEIGHTS = np.array([[0.8], [-0.5], [0.3], [0.0]], dtype=np.float32)


def validation_data() -> tuple[np.ndarray, np.ndarray]:
    """100 records: 15 positives among the first 70, 21 among the last 30, told apart by the model less well."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(VALIDATION_RECORDS, 4)).astype(np.float32)
    y = np.zeros((VALIDATION_RECORDS, 1), dtype=np.float32)
    for share, positives, shift in zip(SHARES, (15, 21), (1.5, 0.0)):
        indices = np.arange(VALIDATION_RECORDS)[share]
        chosen = rng.choice(indices, size=positives, replace=False)
        y[chosen] = 1.0
        x[chosen, 0] += shift  # the score's feature
    return x, y


def training_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(12)
    x = rng.normal(size=(TRAINING_RECORDS, 4)).astype(np.float32)
    return x, (rng.random((TRAINING_RECORDS, 1)) < 0.4).astype(np.float32)


def build_model(
    wrap_optimizer=lambda optimizer: optimizer, wrap_model=lambda model: model, steps_per_execution: int = 1
) -> tf.keras.Model:
    """The fixed model, compiled with a plain accuracy, Keras' binned AUC and the exact ReducerMetric."""
    model = tf.keras.Sequential(
        [
            tf.keras.Input((4,)),
            tf.keras.layers.Dense(
                1,
                activation="sigmoid",
                kernel_initializer=tf.keras.initializers.Constant(_WEIGHTS),
                bias_initializer=tf.keras.initializers.Constant(-0.4),
            ),
        ]
    )
    model = wrap_model(model)
    model.compile(
        optimizer=wrap_optimizer(tf.keras.optimizers.SGD(learning_rate=0.0)),
        loss="binary_crossentropy",
        metrics=["accuracy", tf.keras.metrics.AUC(name="auc"), det.keras.ReducerMetric(RocAuc(), name="roc_auc")],
        steps_per_execution=steps_per_execution,
    )
    return model


def evaluate(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The model's metrics on ``x, y`` in one process."""
    return {
        name: float(value)
        for name, value in build_model().evaluate(x, y, batch_size=BATCH_SIZE, return_dict=True, verbose=0).items()
    }


def share(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Process ``rank``'s validation records."""
    x, y = validation_data()
    return x[SHARES[rank]], y[SHARES[rank]]


class UnevenSplitSequence(tf.keras.utils.Sequence):
    """The validation set as three batches of 40, 30 and 30 records: a trial's process 0 reads
    batches 0 and 2 (70 records), process 1 batch 1 (30), as the harness shards a Sequence."""

    _BATCHES = (slice(0, 40), slice(70, 100), slice(40, 70))

    def __init__(self) -> None:
        super().__init__()
        self._x, self._y = validation_data()

    def __len__(self) -> int:
        return len(self._BATCHES)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self._x[self._BATCHES[index]], self._y[self._BATCHES[index]]


class UnevenSplitTrial(det.keras.TFKerasTrial):
    def build_model(self) -> tf.keras.Model:
        steps = int(self.context.get_hparams().get("steps_per_execution", 1))
        return build_model(self.context.wrap_optimizer, self.context.wrap_model, steps)

    def build_training_data_loader(self) -> Any:
        return training_data()

    def build_validation_data_loader(self) -> Any:
        return UnevenSplitSequence()


def _experiment(entrypoint: dict[str, Any], length: dict[str, int]) -> dict[str, Any]:
    return {**entrypoint, "searcher": {"name": "single", "metric": "val_loss", "max_length": length}}


# det.keras.init()'s script under the TensorFlow launcher, on any stack.
_KERAS_API_UNDER_TENSORFLOW = "python3 -m det_estimator.launch.tensorflow -- python3 uneven_split_script.py keras_api"

# Each front door: the part of its experiment config that makes it that front door.
FRONT_DOORS: dict[str, dict[str, Any]] = {
    "TFKerasTrial": _experiment(
        {"entrypoint": "uneven_split:UnevenSplitTrial"},
        {"batches": math.ceil(TRAINING_RECORDS / (2 * BATCH_SIZE))},
    ),
    # The same trial class: its worker runs under the TensorFlow launcher where Horovod is not installed.
    "TFKerasTrial, TensorFlow": _experiment(
        {"entrypoint": "uneven_split:UnevenSplitTrial"},
        {"batches": math.ceil(TRAINING_RECORDS / (2 * BATCH_SIZE))},
    ),
    # And compiled with several batches per execution (training's 2 batches run as one execution).
    "TFKerasTrial, TensorFlow, steps_per_execution=3": {
        **_experiment(
            {"entrypoint": "uneven_split:UnevenSplitTrial"},
            {"batches": math.ceil(TRAINING_RECORDS / (2 * BATCH_SIZE))},
        ),
        "hyperparameters": {"steps_per_execution": 3},
    },
    "DeterminedCallback, Horovod": _experiment(
        {"entrypoint": "python3 -m det_estimator.launch.horovod -- python3 uneven_split_script.py callback"},
        {"epochs": 1},
    ),
    "DeterminedCallback, TensorFlow": _experiment(
        {"entrypoint": "python3 -m det_estimator.launch.tensorflow -- python3 uneven_split_script.py callback"},
        {"epochs": 1},
    ),
    "det.keras.init, context.fit": _experiment(
        {"entrypoint_script": "python3 uneven_split_script.py keras_api"}, {"epochs": 1}
    ),
    # The same script under the TensorFlow launcher: the workers of a MultiWorkerMirroredStrategy.
    "det.keras.init, TensorFlow": _experiment(
        {"entrypoint_script": _KERAS_API_UNDER_TENSORFLOW},
        {"epochs": 1},
    ),
    # And with tf-keras, where tf.keras is Keras 3 unless told otherwise.
    "det.keras.init, TensorFlow, tf-keras": _experiment(
        {
            "entrypoint_script": _KERAS_API_UNDER_TENSORFLOW,
            "environment": {"environment_variables": ["TF_USE_LEGACY_KERAS=1"]},
        },
        {"epochs": 1},
    ),
}
# The front doors that distribute with Horovod, and the one that is TensorFlow's only where Horovod is not installed.
HOROVOD_FRONT_DOORS = ("TFKerasTrial", "DeterminedCallback, Horovod", "det.keras.init, context.fit")
WITHOUT_HOROVOD_FRONT_DOORS = ("TFKerasTrial, TensorFlow", "TFKerasTrial, TensorFlow, steps_per_execution=3")
# The front doors that run tf-keras where tf.keras is Keras 3 (elsewhere they repeat the Keras 2 one).
TF_KERAS_FRONT_DOORS = ("det.keras.init, TensorFlow, tf-keras",)


def experiment_config(front_door: str, checkpoints: Path) -> dict[str, Any]:
    """The experiment config of ``front_door`` on two slots."""
    door = FRONT_DOORS[front_door]
    return {
        "name": f"uneven split: {front_door}",
        **door,
        "hyperparameters": {"global_batch_size": 2 * BATCH_SIZE, **door.get("hyperparameters", {})},
        "records_per_epoch": TRAINING_RECORDS,
        "resources": {"slots_per_trial": 2},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(checkpoints)},
        "max_restarts": 0,
    }


def context_directory(directory: Path) -> Path:
    """A context directory with the trial, the script and this module."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("uneven_split.py", "uneven_split_script.py"):
        shutil.copy(SUPPORT / name, directory / name)
    return directory


def reported(validation: dict[str, Any]) -> dict[str, float]:
    """The four metrics of a recorded validation, whichever front door named them (with ``val_`` or without)."""
    return {name: float(validation.get(f"val_{name}", validation.get(name, math.nan))) for name in METRICS}


def whole_set() -> dict[str, float]:
    """The metrics one process gets on the whole validation set."""
    return evaluate(*validation_data())


def mean_of_shares() -> dict[str, float]:
    """The mean of each process's own values: what averaging per process would report."""
    shares = [evaluate(*share(rank)) for rank in range(len(SHARES))]
    return {name: float(np.mean([values[name] for values in shares])) for name in METRICS}


class FrontDoorError(RuntimeError):
    """The experiment of a front door failed or recorded no validation."""


def run_front_door(front_door: str, directory: Path, timeout: float = 240) -> dict[str, float]:
    """Trains through ``front_door`` on 2 processes (`det-estimator experiment create`) in ``directory``.

    Returns:
        The four metrics of its last recorded validation.

    Raises:
        FrontDoorError: the experiment failed, did not end within ``timeout`` seconds, or
            recorded no validation (the message holds its output).
    """
    context = context_directory(directory / "context")
    config = directory / "config.yaml"
    config.write_text(yaml.safe_dump(experiment_config(front_door, directory / "checkpoints")))
    store = directory / "store.sqlite"
    command = [COMMAND, "--store", str(store), "experiment", "create", str(config), str(context)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        raise FrontDoorError(f"{front_door}: the experiment did not end within {timeout} s: {expired.stdout}") from None
    if result.returncode != 0:
        raise FrontDoorError(
            f"{front_door}: exit status {result.returncode}:\n{result.stdout[-4000:]}{result.stderr[-4000:]}"
        )
    with ExperimentStore(store) as opened:
        (experiment,) = opened.experiments()
        (trial,) = opened.trials(experiment.id)
        validations = opened.metrics(trial.id, MetricKind.VALIDATION)
    if not validations:
        raise FrontDoorError(f"{front_door} recorded no validation:\n{result.stdout[-4000:]}")
    return reported(validations[-1].metrics)

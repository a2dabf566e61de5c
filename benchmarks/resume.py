"""What resuming costs at batch 100 against batch 100,000 of a 1M-row input pipeline, side by side in one run.

The pipeline: 1,000,000 rows, shuffled with a 10,000-row buffer, in batches of 10 (so
100,000 batches an epoch). For each trial type (an EstimatorTrial and a TFKerasTrial) and
each position the trial first trains to it (the 100,000 batches take a minute or two),
then the positions are resumed in turn, four rounds (``--repeats``), for 10 more batches
each, the near one first in odd rounds and the far one first in even rounds; printed
(medians, after each resume's seconds by round):

1. the harness's resume (the iterator's state restored from the checkpoint): seconds to
   the end of the first batch, from the training session's start (Estimator) or from the
   trial's construction (Keras, whose iterator is restored before ``fit``), which is
   where restoring or replaying the input shows;
2. for comparison, what replaying the input to the same position costs (what a resume did
   before): the first batch of ``repeat().skip(n)`` on the same pipeline.

Usage: ``.venv/bin/python benchmarks/resume.py [--far 100000] [--only estimator|keras] [--repeats 4]``
"""

import argparse
import os
import statistics
import tempfile
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# run_trial records its runs in the experiment store: a throwaway one, not the user's.
os.environ["DET_ESTIMATOR_STORE"] = os.path.join(tempfile.mkdtemp(prefix="resume-"), "store.sqlite")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import det_estimator as det  # noqa: E402

ROWS, BATCH, BUFFER = 1_000_000, 10, 10_000
FEATURES = np.random.default_rng(0).normal(size=(ROWS, 4)).astype(np.float32)
TARGETS = FEATURES @ np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)


def pipeline(
    seed: int, wrap: Callable[[tf.data.Dataset], tf.data.Dataset] = lambda records: records
) -> tf.data.Dataset:
    """The rows, ``wrap``-ped (a Keras trial shards them), shuffled and batched."""
    return wrap(tf.data.Dataset.from_tensor_slices((FEATURES, TARGETS))).shuffle(BUFFER, seed=seed).batch(BATCH)


class FirstBatchTimer(tf.estimator.SessionRunHook):
    """Seconds from the session's creation to the end of its first batch."""

    seconds: list = []

    def after_create_session(self, session, coord):
        self._started = time.perf_counter()
        self._first = True

    def after_run(self, run_context, run_values):
        if self._first:
            FirstBatchTimer.seconds.append(time.perf_counter() - self._started)
            self._first = False


class LinearTrial(det.EstimatorTrial):
    def build_estimator(self):
        optimizer = self.context.wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01))

        def model_fn(features, labels, mode):
            weights = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
            loss = tf.reduce_mean(tf.square(tf.squeeze(features @ weights, 1) - labels))
            train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

        return tf.estimator.Estimator(model_fn)

    def build_train_spec(self):
        return tf.estimator.TrainSpec(lambda: pipeline(self.context.get_trial_seed()), hooks=[FirstBatchTimer()])

    def build_validation_spec(self):
        return tf.estimator.EvalSpec(lambda: pipeline(0).take(1), steps=1)


class KerasFirstBatchTimer(det.keras.callbacks.Callback):
    """Seconds from the trial's construction to the end of its first batch."""

    seconds: list = []

    def __init__(self, started: float) -> None:
        super().__init__()
        self._started = started
        self._first = True

    def on_train_batch_end(self, batch, logs=None):
        if self._first:
            KerasFirstBatchTimer.seconds.append(time.perf_counter() - self._started)
            self._first = False


class KerasLinearTrial(det.keras.TFKerasTrial):
    def __init__(self, context):
        self._started = time.perf_counter()
        super().__init__(context)

    def build_model(self):
        model = self.context.wrap_model(tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)]))
        model.compile(self.context.wrap_optimizer(tf.keras.optimizers.SGD(0.01)), loss="mse")
        return model

    def build_training_data_loader(self):
        return pipeline(self.context.get_trial_seed(), self.context.wrap_dataset)

    def build_validation_data_loader(self):
        return pipeline(0).take(1)

    def keras_callbacks(self):
        return [KerasFirstBatchTimer(self._started)]


TRIALS = {"estimator": (LinearTrial, FirstBatchTimer), "keras": (KerasLinearTrial, KerasFirstBatchTimer)}


def config(storage: str, batches: int, trial_type: str = "estimator") -> dict:
    return {
        "name": "resume",
        "entrypoint": f"resume:{TRIALS[trial_type][0].__name__}",
        "hyperparameters": {"global_batch_size": BATCH},
        # Keras prefixes its validation metrics with "val_".
        "searcher": {
            "name": "single",
            "metric": "val_loss" if trial_type == "keras" else "loss",
            "max_length": {"batches": batches},
        },
        "scheduling_unit": 1000,
        "checkpoint_storage": {"type": "shared_fs", "host_path": storage},
        "reproducibility": {"experiment_seed": 1},
    }


def harness_resumes(trial_type: str, positions: tuple[int, ...], repeats: int = 3) -> dict[int, float]:
    """Trains to each position, then resumes each for 10 batches, in turn, ``repeats`` rounds.

    Returns the median seconds to the first batch at each position. The resumes of the
    positions alternate, and so does which comes first in a round, so that what the
    process did before (graphs traced, memory taken) weighs on each alike: measured one
    position after the other, the second came out up to 0.04 s slower, whichever it was.
    """
    trial, timer = TRIALS[trial_type]
    seconds: dict[int, list[float]] = {position: [] for position in positions}
    with tempfile.TemporaryDirectory() as storage:
        for position in positions:
            det.run_trial(trial, config(storage, position, trial_type), trial_id=f"{trial_type}-at-{position}")
        for resume in range(1, repeats + 1):
            for position in positions if resume % 2 else positions[::-1]:
                before = len(timer.seconds)
                det.run_trial(
                    trial, config(storage, position + 10 * resume, trial_type), trial_id=f"{trial_type}-at-{position}"
                )
                seconds[position].append(timer.seconds[before])
    for position, values in seconds.items():
        print(f"{trial_type} resumes at {position:,} batches, by round: " + " ".join(f"{v:.3f}" for v in values))
    return {position: statistics.median(values) for position, values in seconds.items()}


def replay(position: int, repeats: int = 3) -> float:
    """The first batch of the pipeline replayed to ``position`` (what a resume did before)."""
    timings = []
    for _ in range(repeats):
        with tf.Graph().as_default():
            element = tf.compat.v1.data.make_one_shot_iterator(pipeline(1).repeat().skip(position)).get_next()
            with tf.compat.v1.Session() as session:
                started = time.perf_counter()
                session.run(element)
                timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--near", type=int, default=100)
    parser.add_argument("--far", type=int, default=100_000)
    parser.add_argument("--only", choices=sorted(TRIALS), help="time one trial type (default: both)")
    parser.add_argument("--repeats", type=int, default=4, help="rounds of resumes (default: 4)")
    args = parser.parse_args()
    positions = (args.near, args.far)
    trial_types = [args.only] if args.only else list(TRIALS)
    restored = {
        (kind, position): seconds
        for kind in trial_types
        for position, seconds in harness_resumes(kind, positions, args.repeats).items()
    }
    replay(args.near)  # warm-up: the first graph and session of the process cost more
    replayed = {position: replay(position) for position in positions}
    print(
        f"\nResume of a {ROWS:,}-row pipeline (shuffle buffer {BUFFER:,}, batches of {BATCH}), "
        "seconds to the first batch"
    )
    header = "".join(f"{kind + ': state restored':>28}" for kind in trial_types)
    print(f"{'position (batches)':>20}{header}{'replaying the input':>22}")
    for position in positions:
        row = "".join(f"{restored[kind, position]:>28.3f}" for kind in trial_types)
        print(f"{position:>20,}{row}{replayed[position]:>22.3f}")
    ratios = ", ".join(f"{kind} {restored[kind, args.far] / restored[kind, args.near]:.2f}x" for kind in trial_types)
    print(
        f"far / near: restored {ratios}; replayed {replayed[args.far] / replayed[args.near]:.1f}x "
        "(goal: the harness's far resume no longer than its near one)"
    )


if __name__ == "__main__":
    main()

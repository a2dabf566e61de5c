"""context.fit in an experiment: one model.fit per searcher operation, each going on from the last."""

import numpy as np
import pytest
import tensorflow as tf

from det_estimator import core
from det_estimator.core._searcher import FixedLengths
from det_estimator.keras._api._context import KerasContext, Optimizations, TrainingContext
from det_estimator.store import ExperimentStore, MetricKind

RECORDS, BATCH_SIZE = 64, 8  # 8 batches per epoch


def linear() -> tf.keras.Model:
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    return model


def data():
    x = np.random.default_rng(1).normal(size=(RECORDS + 16, 2)).astype("float32")
    y = (x @ np.array([[1.0], [-1.0]])).astype("float32")
    return (x[:RECORDS], y[:RECORDS]), (x[RECORDS:], y[RECORDS:])


@pytest.fixture
def launched(own_store, tmp_path):
    """A run recorded in the test's store, as a launched trial whose searcher gives operations of 1 then 3 epochs."""
    config = {
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 3}},
        "records_per_epoch": RECORDS,
        "hyperparameters": {"global_batch_size": BATCH_SIZE},
    }
    core_context = core.init(config=config, checkpoint_storage=tmp_path / "checkpoints").start()
    completed = []
    core_context.searcher = core.SearcherContext(core_context.distributed, FixedLengths([1, 3]), core.Unit.EPOCHS)
    real_operations = core_context.searcher.operations

    def operations(*args, **kwargs):
        for op in real_operations(*args, **kwargs):
            yield op
            completed.append((op.length, op._metric))

    core_context.searcher.operations = operations
    info = core_context.info
    training = TrainingContext(
        hparams={"global_batch_size": BATCH_SIZE},
        trial_id=info.trial.trial_id,
        experiment_id=info.trial.experiment_id,
        seed=0,
        core=core_context,
        launched=True,
        searcher_metric="val_loss",
    )
    context = KerasContext(core_context.distributed, training, {}, 0, Optimizations(), core_context.store, "TRIAL")
    yield context, completed
    context.close()


def test_each_operation_trains_on_to_its_length_and_reports_its_metric(launched):
    context, completed = launched
    (x, y), validation = data()
    model = linear()
    history = context.fit(
        model, x, y, batch_size=BATCH_SIZE, epochs=50, shuffle=False, validation_data=validation, verbose=0
    )

    assert history.epoch == [0, 1, 2]  # epochs=50 is ignored: the operations say 1, then 3 in all
    assert [length for length, _ in completed] == [1, 3]
    assert [metric for _, metric in completed] == pytest.approx(
        [history.history["val_loss"][0], history.history["val_loss"][2]]
    )
    assert int(model.optimizer.iterations.numpy()) == 3 * RECORDS // BATCH_SIZE

    # The same three epochs as one model.fit of 3 epochs.
    reference = linear()
    expected = reference.fit(
        x, y, batch_size=BATCH_SIZE, epochs=3, shuffle=False, validation_data=validation, verbose=0
    )
    assert history.history["val_loss"] == pytest.approx(expected.history["val_loss"], rel=1e-6)

    with ExperimentStore(context.training.core.info.store_path) as store:
        validations = store.metrics(context.training.trial_id, MetricKind.VALIDATION)
    assert [v.batches for v in validations] == [8, 16, 24]
    assert [v.metrics["epochs"] for v in validations] == [1, 2, 3]


def test_a_paused_trial_ends_inside_fit_so_the_code_after_it_does_not_run(launched):
    """The code after fit is for a finished training: after a pause its History may hold no validation yet."""
    context, completed = launched
    (x, y), validation = data()
    model = linear()
    context.training.core._watcher.request()  # what Ctrl-C or `experiment pause` does

    with pytest.raises(SystemExit) as exited:
        context.fit(model, x, y, batch_size=BATCH_SIZE, shuffle=False, validation_data=validation, verbose=0)

    assert exited.value.code == 0  # a clean exit: the launcher records the trial as PAUSED
    assert context.training.core.preempt.acknowledged
    # The pause is seen at batch 10, in the second operation, which a resume goes on with.
    assert [length for length, _ in completed] == [1]
    with ExperimentStore(context.training.core.info.store_path) as store:
        checkpoints = store.checkpoints(context.training.experiment_id)
    assert checkpoints[-1].batches == int(model.optimizer.iterations.numpy()) == 10

"""DeterminedCallback as the reference system documents it: its checkpoints load with ``model.load_weights``,
``save_model`` / ``load_model`` can be overridden, and validation calls the callbacks in Keras' order."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator.keras._engine._keras_compat import KERAS_3
from det_estimator.store import ExperimentStore

from .linear_script import build_model, dataset

SUPPORT = Path(__file__).parent.parent / "support"


@pytest.fixture(scope="module")
def order(module_loader):
    return module_loader(SUPPORT / "callback_order.py")


def fit_with_callback(callback_class=det.keras.DeterminedCallback, epochs=2, checkpoint=None, extra=()):
    """Fits the linear model with the callback; returns the model and the checkpoints' directories, oldest first."""
    model = build_model()
    with det.core.init() as core_context:
        callback = callback_class(core_context, checkpoint, "run")
        model.fit(dataset(0, 1), epochs=epochs, callbacks=[callback, *extra], verbose=0)
        info = core_context.info
    with ExperimentStore(info.store_path) as store:
        written = store.checkpoints(info.trial.experiment_id, trial_id=info.trial.trial_id)
    return model, [Path(item.path) for item in written]


@pytest.mark.skipif(
    KERAS_3, reason="Keras 3's load_weights reads only .weights.h5 files, as the reference's save_weights"
)
def test_model_load_weights_of_the_checkpoint_s_model_checkpoint_gives_the_trained_model():
    trained, checkpoints = fit_with_callback()
    model = build_model()
    model.load_weights(str(checkpoints[-1] / "model_checkpoint"))
    for loaded, expected in zip(model.weights, trained.weights):
        np.testing.assert_array_equal(loaded.numpy(), expected.numpy())
    # The optimizer's state came with it, as it does from the reference's save_weights.
    assert int(model.optimizer.iterations.numpy()) == int(trained.optimizer.iterations.numpy())


def test_the_keras_loader_rebuilds_the_callback_s_model():
    trained, checkpoints = fit_with_callback()
    model = det.keras.load_model_from_checkpoint_path(checkpoints[-1])
    x, _ = next(iter(dataset(0, 1)))
    np.testing.assert_array_equal(model(x).numpy(), trained(x).numpy())


class NumpyWeights(det.keras.DeterminedCallback):
    """Saves the weights as one .npz file, as a script might override the callback's saving."""

    saved: list = []
    loaded: list = []

    def save_model(self, model, path, distributed):
        NumpyWeights.saved.append((path, distributed.rank))
        np.savez(path + ".npz", *model.get_weights())

    def load_model(self, model, path, distributed):
        NumpyWeights.loaded.append(path)
        with np.load(path + ".npz") as saved:
            model.set_weights([saved[f"arr_{index}"] for index in range(len(saved.files))])


def test_an_override_of_save_model_and_load_model_writes_and_reads_the_checkpoint_s_model():
    NumpyWeights.saved.clear()
    trained, checkpoints = fit_with_callback(NumpyWeights, epochs=2)
    # Once per checkpoint (one per epoch), at the prefix model_checkpoint of the checkpoint being written.
    assert len(NumpyWeights.saved) == 2
    assert all(Path(path).name == "model_checkpoint" and rank == 0 for path, rank in NumpyWeights.saved)
    assert Path(NumpyWeights.saved[-1][0]).parent.name.endswith(checkpoints[-1].name)
    with np.load(checkpoints[-1] / "model_checkpoint.npz") as saved:
        for index, expected in enumerate(trained.get_weights()):
            np.testing.assert_array_equal(saved[f"arr_{index}"], expected)
    assert not list(checkpoints[-1].glob("model_checkpoint.index"))  # the override alone wrote the model

    # A warm start from it (another continue_id) reads the weights through load_model.
    NumpyWeights.loaded.clear()
    from_checkpoint = build_model()
    with det.core.init() as core_context:
        callback = NumpyWeights(core_context, checkpoints[-1].name, "another run")
        loaded = []
        read = tf.keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs: loaded.append(from_checkpoint.get_weights())
        )
        from_checkpoint.fit(dataset(0, 1), epochs=1, callbacks=[callback, read], verbose=0)
    assert NumpyWeights.loaded == [str(checkpoints[-1] / "model_checkpoint")]
    for got, expected in zip(loaded[0], trained.get_weights()):
        np.testing.assert_array_equal(got, expected)


def test_fit_with_validation_calls_the_callbacks_in_plain_keras_order(order):
    checker = order.OrderChecker()
    fit_with_callback(extra=[checker])
    order.check_order(checker.calls)
    validation = {"validation_data": dataset(0, 1)}
    plain = order.plain_keras_calls(build_model(), dataset(0, 1), epochs=2, **validation)

    checker = order.OrderChecker()
    model = build_model()
    with det.core.init() as core_context:
        callback = det.keras.DeterminedCallback(core_context, None, "run")
        model.fit(dataset(0, 1), epochs=2, callbacks=[callback, checker], verbose=0, **validation)
    assert checker.calls == plain

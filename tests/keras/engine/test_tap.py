"""The train function as the engine drives it: executions cut at any batch, fit's iterator read where it stood."""

import numpy as np
import pytest
import tensorflow as tf

from det_estimator.keras._engine._tap import Tap

X = np.arange(64, dtype=np.float32)[:, None] / 64
DATA = tf.data.Dataset.from_tensor_slices((X, 3 * X)).shuffle(64, seed=1, reshuffle_each_iteration=False).batch(8)


def model(steps_per_execution: int) -> tf.keras.Model:
    tf.keras.utils.set_random_seed(0)
    built = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1, kernel_initializer="zeros")])
    built.compile(tf.keras.optimizers.SGD(0.1, momentum=0.9), "mse", steps_per_execution=steps_per_execution)
    return built


def weights(trained: tf.keras.Model) -> np.ndarray:
    return np.concatenate([weight.ravel() for weight in trained.get_weights()])


def plain_fit(batches: int) -> np.ndarray:
    trained = model(1)
    trained.fit(DATA.repeat(), steps_per_epoch=batches, epochs=1, verbose=0)
    return weights(trained)


def test_executions_cut_at_any_batch_train_what_one_batch_at_a_time_trains():
    tapped = model(4)
    tap = Tap(tapped)
    iterator = iter(DATA.repeat())
    for batches in (3, 2, 4, 1, 2):  # 12 batches, cut where workloads would end
        tap(iterator, batches, pause=False, stop=False)
    assert tap.batches_per_call == 4 and int(tapped.optimizer.iterations.numpy()) == 12
    np.testing.assert_array_equal(weights(tapped), plain_fit(12))


def test_fit_reads_from_the_iterator_the_first_step_gives_until_the_epoch_ends(tmp_path):
    saved = iter(DATA.repeat())
    for _ in range(5):
        next(saved)
    tf.train.Checkpoint(iterator=saved).write(str(tmp_path / "iterator"))
    resumed = model(1)
    resumed.fit(DATA.repeat(), steps_per_epoch=5, epochs=1, verbose=0)  # the first 5 batches, as before a pause

    class Resume(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            def at_saved_position(iterator):
                tf.train.Checkpoint(iterator=iterator).read(str(tmp_path / "iterator")).assert_consumed()
                return iterator

            self.tap = Tap(self.model)
            self.tap.read_first(at_saved_position)

    resumed.fit(DATA.repeat(), steps_per_epoch=7, epochs=1, verbose=0, callbacks=[Resume()])
    np.testing.assert_array_equal(weights(resumed), plain_fit(12))


def test_a_train_function_that_raises_leaves_the_model_its_own():
    failing = model(1)

    class Breaks(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.own = self.model.train_function
            self.tap = Tap(self.model)
            self.tap.read_first(broken)
            self.tap.skip_evaluation()

    def broken(iterator):
        raise ValueError("the input broke")

    breaks = Breaks()
    with pytest.raises(ValueError, match="the input broke"):
        failing.fit(DATA, epochs=1, verbose=0, callbacks=[breaks])
    assert failing.train_function is breaks.own
    assert "evaluate" not in vars(failing)

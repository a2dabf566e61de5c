"""The engine's own versions of Keras internals agree with Keras 2.15; each use of an internal does what it says."""

import importlib
import logging
import time

import numpy as np
import pytest
import tensorflow as tf

from det_estimator.keras._api._fit import split_validation
from det_estimator.keras._engine import _keras_compat
from det_estimator.keras._engine._inputs import _class_weighted

CLASS_WEIGHT = {0: 0.5, 1: 2.0, 2: 3.0}


@pytest.mark.parametrize(
    "labels",
    [
        np.array([0, 2, 1, 0]),  # sparse, rank 1
        np.array([[0.0], [2.0], [1.0], [0.9]], np.float32),  # one column: rounded
        np.eye(3, dtype=np.float32)[[2, 0, 1, 1]],  # one-hot: argmax
    ],
    ids=["sparse", "column", "one-hot"],
)
@pytest.mark.parametrize("with_sample_weights", [False, True])
def test_class_weights_are_those_keras_applies(labels, with_sample_weights):
    x = np.arange(4, dtype=np.float32)[:, None]
    data = (x, labels, np.array([1.0, 2.0, 3.0, 4.0], np.float32)) if with_sample_weights else (x, labels)
    dataset = tf.data.Dataset.from_tensor_slices(data).batch(4)
    (_, _, ours), *_ = list(_class_weighted(dataset, CLASS_WEIGHT))
    # Keras' own, on the batch's tensors (in a dataset it needs static shapes these batches do not have).
    data_adapter = pytest.importorskip(
        f"{_keras_compat.KERAS_2_PACKAGE}.src.engine.data_adapter", reason="Keras 2's class weights, compared"
    )
    _, _, keras = data_adapter._make_class_weight_map_fn(CLASS_WEIGHT)(*map(tf.constant, data))
    np.testing.assert_array_equal(ours.numpy(), keras.numpy())


def test_class_weights_need_every_class_from_zero():
    with pytest.raises(ValueError, match="keys from 0 to one less than the number of classes"):
        _class_weighted(tf.data.Dataset.range(2), {1: 1.0})


def _keras_train_validation_split():
    if _keras_compat.KERAS_3:
        from keras.src.trainers.data_adapters.array_slicing import train_validation_split

        return train_validation_split
    return importlib.import_module(f"{_keras_compat.KERAS_2_PACKAGE}.src.engine.data_adapter").train_validation_split


@pytest.mark.parametrize("split", [0.25, 0.3, 0.5])
def test_the_validation_split_of_arrays_is_keras_own(split):
    x, y, w = np.arange(20.0).reshape(10, 2), {"a": np.arange(10)}, None
    ours = split_validation(x, y, w, split)
    keras = _keras_train_validation_split()((x, y, w), validation_split=split)
    for mine, theirs in zip(tf.nest.flatten(ours), tf.nest.flatten(keras)):
        np.testing.assert_array_equal(mine, theirs)


def test_a_split_of_too_few_records_or_of_other_data_is_refused_as_keras_refuses_it():
    with pytest.raises(ValueError, match="not sufficient to split"):
        split_validation(np.zeros((1, 1)), np.zeros(1), None, 0.5)
    with pytest.raises(ValueError, match="only supported for Tensors or NumPy arrays"):
        split_validation([[1.0], [2.0]], np.zeros(2), None, 0.5)


def test_what_compile_was_given_and_how_many_steps_an_execution_runs():
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    assert not _keras_compat.is_compiled(model)
    auc = tf.keras.metrics.AUC()
    model.compile("sgd", "mse", metrics=[auc], weighted_metrics=["mae"], steps_per_execution=3)
    assert _keras_compat.is_compiled(model)
    assert _keras_compat.metrics_given_to_compile(model) == [auc, "mae"]


@pytest.mark.skipif(_keras_compat.KERAS_3, reason="Keras 3 bakes steps_per_execution into the train function")
def test_how_many_steps_an_execution_runs_is_a_variable():
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=3)
    assert int(_keras_compat.steps_per_execution(model).numpy()) == 3


@pytest.mark.skipif(not _keras_compat.KERAS_3, reason="Keras 2 reads steps_per_execution from a variable")
def test_a_keras_3_evaluation_runs_one_batch_per_call_inside_and_the_model_s_own_function_after():
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1, kernel_initializer="ones")])
    model.compile("sgd", "mse", steps_per_execution=3)
    x, y = np.arange(5.0, dtype=np.float32)[:, None], np.zeros((5, 1), np.float32)
    calls = []

    class Count(tf.keras.callbacks.Callback):
        def on_test_batch_end(self, batch, logs=None):
            calls.append(batch)

    for _ in range(2):  # the second use takes the function the first traced
        with _keras_compat.one_batch_evaluation(model):
            assert model.steps_per_execution == 1
            loss = model.evaluate(x, y, batch_size=1, callbacks=[Count()], verbose=0)
    assert calls == [0, 1, 2, 3, 4] * 2  # one call per batch
    assert loss == pytest.approx(float(np.mean(x**2)), rel=1e-6)
    assert model.steps_per_execution == 3
    calls.clear()
    model.evaluate(x, y, batch_size=1, callbacks=[Count()], verbose=0)
    assert len(calls) == 2  # the model's own function: executions of 3 batches


@pytest.mark.skipif(not _keras_compat.KERAS_3, reason="Keras 3's SeedGenerator")
def test_keras_3_seed_generator_states_are_found_and_go_through_a_checkpoint(tmp_path):
    assert _keras_compat.enable_layer_generators() is True  # nothing to enable: seed generators from the start
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dropout(0.5, name="drop")])
    ((layer, seed_generator),) = _keras_compat.random_layers(model)
    assert layer.name == "drop" and not _keras_compat.draws_from_stateful_ops(seed_generator)
    ones = np.ones((64, 16), np.float32)

    def mask() -> np.ndarray:
        return model(ones, training=True).numpy() == 0

    def checkpoint() -> tf.train.Checkpoint:
        return tf.train.Checkpoint(model=model, layer_generators=[_keras_compat.generator_of(seed_generator)])

    path = checkpoint().write(str(tmp_path / "ckpt"))
    first = mask()
    assert not np.array_equal(mask(), first)  # each draw moves the state on
    checkpoint().read(path)
    np.testing.assert_array_equal(mask(), first)  # restored: the draw after the checkpoint comes again


@pytest.mark.skipif(_keras_compat.KERAS_3, reason="Keras 2's tf.random.Generator per layer; Keras 3 has none")
def test_layer_generators_are_found_created_and_told_from_stateful_ops():
    tf.keras.backend.experimental.enable_tf_random_generator()
    try:
        with_generator = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dropout(0.5, name="drop")])
    finally:
        tf.keras.backend.experimental.disable_tf_random_generator()
    stateful = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dropout(0.5, name="old")])
    (layer, random_generator), *others = _keras_compat.random_layers(with_generator)
    assert layer.name == "drop" and not others
    _keras_compat.create_generator(random_generator)  # made at the layer's build or first call otherwise
    assert isinstance(_keras_compat.generator_of(random_generator), tf.random.Generator)
    assert not _keras_compat.draws_from_stateful_ops(random_generator)
    ((_, old),) = _keras_compat.random_layers(stateful)
    assert _keras_compat.draws_from_stateful_ops(old)


def test_a_view_without_the_optimizer_reads_the_weights_and_leaves_the_optimizer(tmp_path):
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1, kernel_initializer="ones")])
    model.compile(tf.keras.optimizers.SGD(momentum=0.9), "mse")
    model.fit(np.ones((4, 1)), np.zeros((4, 1)), verbose=0)
    tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    fresh = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    fresh.compile(tf.keras.optimizers.SGD(momentum=0.9), "mse")
    status = tf.train.Checkpoint(model=_keras_compat.model_without_optimizer(fresh)).read(str(tmp_path / "ckpt"))
    status.expect_partial()
    np.testing.assert_array_equal(fresh.get_weights()[0], model.get_weights()[0])
    assert int(fresh.optimizer.iterations.numpy()) == 0


def test_the_dataset_of_an_iterator():
    dataset = tf.data.Dataset.range(3)
    assert _keras_compat.dataset_of(iter(dataset)) is dataset
    assert _keras_compat.dataset_of(iter([1, 2])) is None


@pytest.mark.skipif(_keras_compat.KERAS_3, reason="Keras 3's CallbackList times no hook")
def test_callbacks_given_to_fit_untimed_draw_no_slow_hook_warning(caplog):
    class Slow(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(0.02)

    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    data = tf.data.Dataset.from_tensors((np.ones((1, 1), np.float32), np.ones((1, 1), np.float32))).repeat()
    with caplog.at_level(logging.WARNING):
        model.fit(data, steps_per_epoch=8, verbose=0, callbacks=[Slow()])
    assert "is slow compared to the batch time" in caplog.text  # what Keras says of the same hooks it times
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model.fit(data, steps_per_epoch=8, verbose=0, callbacks=_keras_compat.untimed_callbacks([Slow()], model))
    assert "is slow" not in caplog.text


@pytest.mark.skipif(not _keras_compat.KERAS_3, reason="Keras 3's TensorFlow trainer; Keras 2 needs no repair")
def test_the_multi_worker_repair_replaces_the_keras_3_internals_it_was_written_for():
    import inspect

    from keras.src.backend.tensorflow import trainer

    import det_estimator.keras  # noqa: F401  (installs the repair)

    build, reduce = trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica
    assert hasattr(build, "keras_own") and hasattr(reduce, "keras_own"), "importing det_estimator.keras installs it"
    _keras_compat.repair_multi_worker_fit()  # a second time changes nothing
    assert trainer.TensorFlowTrainer._maybe_symbolic_build is build and trainer.reduce_per_replica is reduce
    # What the repair stands in for, as this Keras release has it: a change here needs a look at the repair.
    keras_signatures = {
        "_maybe_symbolic_build": list(inspect.signature(build.keras_own).parameters),
        "reduce_per_replica": list(inspect.signature(reduce.keras_own).parameters),
    }
    assert keras_signatures == {
        "_maybe_symbolic_build": ["self", "iterator", "data_batch"],
        "reduce_per_replica": ["values", "strategy", "reduction"],
    }, f"Keras {_keras_compat.keras_version()} changed what _keras_compat.repair_multi_worker_fit replaces"
    assert "_maybe_symbolic_build" in inspect.getsource(trainer.TensorFlowTrainer.fit), "fit no longer builds there"

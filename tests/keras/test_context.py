"""TFKerasTrialContext: configure_fit, the wrappers on one process, hyperparameters, the cache, the reference names."""

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator.config import load_experiment_config
from det_estimator.keras import TFKerasTrialContext
from det_estimator.keras._fit_config import FitConfig


@pytest.fixture
def context(tmp_path):
    raw = {
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": 32, "layers": {"units": 8}},
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 10}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)},
        "data": {"rows": 100},
    }
    return TFKerasTrialContext(load_experiment_config(raw), {"global_batch_size": 32, "layers": {"units": 8}}, 11)


def test_configure_fit_keeps_what_earlier_calls_set(context):
    assert context.fit_config == FitConfig()  # Keras' defaults
    context.configure_fit(verbose=False, workers=5, class_weight={0: 1.0, 1: 3.0})
    context.configure_fit(use_multiprocessing=True, validation_steps=7)
    context.configure_fit(shuffle=False)
    assert context.fit_config == FitConfig(
        verbose=False,
        class_weight={0: 1.0, 1: 3.0},
        workers=5,
        use_multiprocessing=True,
        max_queue_size=10,
        shuffle=False,
        validation_steps=7,
    )
    context.configure_fit(class_weight=None, validation_steps=None)  # None is a value of its own for these
    assert context.fit_config.class_weight is None and context.fit_config.validation_steps is None
    assert context.fit_config.workers == 5


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"workers": -1}, ValueError, r"Argument `workers` must be an integer of at least 0. Received: workers=-1"),
        ({"max_queue_size": 0}, ValueError, "Argument `max_queue_size` must be an integer of at least 1"),
        ({"validation_steps": 2.5}, ValueError, "Received: validation_steps=2.5"),
        ({"verbose": "yes"}, TypeError, "Argument `verbose` must be a bool. Received: verbose='yes'"),
        ({"class_weight": [1.0, 2.0]}, TypeError, r"Argument `class_weight` must be a dict"),
    ],
)
def test_configure_fit_refuses_values_keras_would_not_take(context, arguments, error, message):
    with pytest.raises(error, match=message):
        context.configure_fit(**arguments)


def test_hyperparameters_batch_sizes_and_config(context):
    assert context.get_hparam("layers") == {"units": 8}
    with pytest.raises(KeyError, match="'lr' is not defined in the experiment config; .*: global_batch_size, layers"):
        context.get_hparam("lr")
    assert (context.get_global_batch_size(), context.get_per_slot_batch_size()) == (32, 32)
    assert context.get_data_config() == {"rows": 100} and context.get_trial_seed() == 11
    assert context.distributed.size == 1 and context.get_experiment_config()["searcher"]["metric"] == "val_loss"


def test_on_one_process_the_wrappers_change_nothing(context):
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    assert context.wrap_model(model) is model and context.is_wrapped_model(model)
    optimizer = tf.keras.optimizers.SGD(0.1)
    assert context.wrap_optimizer(optimizer) is optimizer
    model.compile(optimizer=optimizer, loss="mse")
    assert model.optimizer is optimizer and context.is_wrapped_optimizer(model.optimizer)
    dataset = tf.data.Dataset.range(4)
    assert list(context.wrap_dataset(dataset).as_numpy_iterator()) == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="Argument `model` must be a tf.keras.Model. Received: str"):
        context.wrap_model("model")
    with pytest.raises(TypeError, match="Argument `dataset` must be a tf.data.Dataset. Received: ndarray"):
        context.wrap_dataset(np.arange(3))


def test_a_cached_dataset_is_built_once_and_counts_as_wrapped(context, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    builds = []

    @context.experimental.cache_train_dataset("numbers", "v1", shuffle=True)
    def numbers():
        builds.append(1)
        return tf.data.Dataset.range(20)

    first = numbers()
    numbers()  # read from the cache
    assert len(builds) == 1 and context.is_wrapped_dataset(first.batch(4))
    assert sorted(first.as_numpy_iterator()) == list(range(20))
    assert list(first.as_numpy_iterator()) != list(range(20))  # shuffled with the trial seed
    with pytest.raises(ValueError, match="Argument `dataset_id` must start with a letter or digit"):
        context.experimental.cache_validation_dataset("../up", "v1")


def test_the_reference_names_are_there(context):
    assert det.keras.TFKerasTrial.trial_context_class is TFKerasTrialContext
    assert isinstance(context, det.TrialContext)  # the base the reference's index names
    assert det.keras.callbacks.ReduceLRScheduler is det.keras.callbacks.ReduceLROnPlateau
    assert det.keras.TFKerasTensorBoard is det.keras.callbacks.TensorBoard


@pytest.mark.estimator
def test_the_estimator_context_has_the_same_base():
    assert issubclass(det.EstimatorTrialContext, det.TrialContext)


def test_the_reference_native_keras_api_is_refused_naming_what_replaces_it():
    import det_estimator.experimental.keras  # noqa: F401 -- the reference's import line, ported

    with pytest.raises(NotImplementedError, match=r"native Keras API.*det\.keras\.init\(config=\.\.\.\)") as raised:
        det.experimental.keras.init({"hyperparameters": {}}, local=True)
    assert isinstance(raised.value, det.DetEstimatorError)


def test_wrap_dataset_does_not_shard_a_share_again(context, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    second = TFKerasTrialContext(
        load_experiment_config(context.get_experiment_config()),
        context.get_hparams(),
        11,
        distributed=SimpleNamespace(rank=1, size=2),  # rank 1 of 2
    )
    share = second.wrap_dataset(tf.data.Dataset.range(10))
    assert list(share.as_numpy_iterator()) == [1, 3, 5, 7, 9]
    with pytest.raises(det.errors.TrialDefinitionError, match=r"must be a dataset that is not yet this process's"):
        second.wrap_dataset(share.map(lambda record: record + 1))
    # Another dataset is a new share; shard_dataset=False shards nothing.
    assert list(second.wrap_dataset(tf.data.Dataset.range(4)).as_numpy_iterator()) == [1, 3]
    assert list(second.wrap_dataset(share, shard_dataset=False).as_numpy_iterator()) == [1, 3, 5, 7, 9]

    @second.experimental.cache_train_dataset("numbers", "v1", shuffle=False)
    def numbers():
        return tf.data.Dataset.range(20)

    with pytest.raises(det.errors.TrialDefinitionError, match=r"must be a dataset that is not yet this process's"):
        second.wrap_dataset(numbers().batch(4))

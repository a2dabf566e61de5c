"""cache_train_dataset / cache_validation_dataset, called from inside a graph as an input_fn is."""

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "det-estimator" / "datasets"


def records_of(dataset, epochs=1):
    """Every record of ``dataset`` (repeated ``epochs`` times), read in a graph of its own."""
    with tf.Graph().as_default():
        dataset = dataset() if callable(dataset) else dataset
        element = tf.compat.v1.data.make_one_shot_iterator(dataset.repeat(epochs)).get_next()
        values = []
        with tf.compat.v1.Session() as session:
            try:
                while True:
                    values.append(int(session.run(element)))
            except tf.errors.OutOfRangeError:
                return values


class Builder:
    """A dataset function that counts how often it is really called."""

    def __init__(self, size=20):
        self.calls = 0
        self.size = size

    def __call__(self):
        self.calls += 1
        return tf.data.Dataset.range(self.size)


def test_a_dataset_is_built_once_and_reused_until_its_version_changes():
    builder = Builder()
    first = det.EstimatorContext().experimental.cache_train_dataset("numbers", "v1")(builder)
    second = det.EstimatorContext().experimental.cache_train_dataset("numbers", "v1")(builder)
    assert records_of(first) == list(range(20)) and records_of(second) == list(range(20))
    assert builder.calls == 1
    newer = det.EstimatorContext().experimental.cache_train_dataset("numbers", "v2")(Builder(5))
    assert records_of(newer) == list(range(5))


def test_a_half_written_cache_is_never_read(private_cache):
    # What a writer that crashed leaves: a partial directory, and a final one without its marker.
    (private_cache / "numbers" / ".partial-v1-dead").mkdir(parents=True)
    (private_cache / "numbers" / "v1").mkdir()
    (private_cache / "numbers" / "v1" / "garbage").write_text("half")
    builder = Builder(7)
    cached = det.EstimatorContext().experimental.cache_validation_dataset("numbers", "v1")(builder)
    assert records_of(cached) == list(range(7)) and builder.calls == 1


def test_cached_train_data_is_shuffled_with_the_seed_and_reshuffled_each_epoch():
    def read(seed, **options):
        context = det.EstimatorContext(seed=seed)
        return records_of(context.experimental.cache_train_dataset("numbers", "v1", **options)(Builder()), epochs=2)

    shuffled = read(1, shuffle=True)
    assert sorted(shuffled[:20]) == list(range(20)) and shuffled[:20] != list(range(20))
    assert shuffled[:20] != shuffled[20:], "a new order every epoch"
    assert read(1, shuffle=True) == shuffled and read(2, shuffle=True) != shuffled
    same_every_epoch = read(1, shuffle=True, skip_shuffle_at_epoch_end=True)
    assert same_every_epoch[:20] == same_every_epoch[20:]
    assert read(1) == list(range(20)) * 2


def test_cached_validation_data_keeps_one_order():
    context = det.EstimatorContext(seed=3)
    cached = context.experimental.cache_validation_dataset("numbers", "v1", shuffle=True)(Builder())
    in_two_epochs = records_of(cached, epochs=2)
    assert in_two_epochs[:20] == in_two_epochs[20:] != list(range(20))


def test_a_cached_dataset_counts_as_a_wrapped_one():
    context = det.EstimatorContext()
    records_of(context.experimental.cache_train_dataset("numbers", "v1")(Builder()))
    assert context.wrapped_datasets == 1


def test_a_cached_dataset_is_not_sharded_again_by_wrap_dataset():
    # Each process reads its own shard of the cache: wrap_dataset would keep a fraction of it.
    context = det.EstimatorContext()
    cached = context.experimental.cache_train_dataset("numbers", "v1")(Builder())
    with tf.Graph().as_default():
        for derived in (cached(), cached().map(lambda record: record * 2).batch(4)):
            with pytest.raises(ValueError, match=r"Received one built from a dataset .*cache_train_dataset"):
                context.wrap_dataset(derived)
    assert records_of(lambda: context.wrap_dataset(cached(), shard_dataset=False)) == list(range(20))
    assert records_of(lambda: context.wrap_dataset(tf.data.Dataset.range(3))) == [0, 1, 2]


def test_bad_names_and_bad_functions_are_clear_errors():
    experimental = det.EstimatorContext().experimental
    with pytest.raises(ValueError, match=r"Argument `dataset_id` must start with a letter or digit.*'\.\./x'"):
        experimental.cache_train_dataset("../x", "v1")
    with pytest.raises(ValueError, match=r"Argument `dataset_version` .* Received: dataset_version=''"):
        experimental.cache_validation_dataset("ok", "")
    not_a_dataset = experimental.cache_train_dataset("numbers", "v1")(lambda: np.arange(3))
    with pytest.raises(TypeError, match="must return a tf.data.Dataset. Received: ndarray"):
        records_of(not_a_dataset)

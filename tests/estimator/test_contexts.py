from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator import _root_cause
from det_estimator.config import load_experiment_config
from det_estimator.errors import UndefinedHyperparameterError


def make_config(**overrides):
    raw = {
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": 32, "lr": 0.1, "model": {"units": 8}},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    }
    raw.update(overrides)
    return load_experiment_config(raw)


def trial_context(**overrides):
    config = make_config(**overrides)
    return det.EstimatorTrialContext(config, config.sample_hyperparameters(3), trial_seed=3)


class TestWrappersInOneProcess:
    def test_wrap_optimizer_returns_the_optimizer_and_counts_the_call(self):
        context = trial_context()
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        assert context.wrap_optimizer(optimizer) is optimizer
        assert context.wrapped_optimizers == 1

    def test_wrap_dataset_keeps_every_record_in_one_process(self):
        context = trial_context()
        dataset = context.wrap_dataset(tf.data.Dataset.range(10))
        assert list(dataset.as_numpy_iterator()) == list(range(10))
        assert context.wrapped_datasets == 1

    def test_wrap_dataset_rejects_what_is_not_a_dataset(self):
        with pytest.raises(TypeError, match=r"Argument `dataset` must be a tf.data.Dataset. Received: ndarray"):
            trial_context().wrap_dataset(np.arange(3))

    def test_wrap_dataset_does_not_shard_a_share_again(self):
        context = det.EstimatorContext(distributed=SimpleNamespace(rank=1, size=2))  # rank 1 of 2
        share = context.wrap_dataset(tf.data.Dataset.range(10))
        assert list(share.as_numpy_iterator()) == [1, 3, 5, 7, 9]
        with pytest.raises(ValueError, match=r"must be a dataset that is not yet this process's share"):
            context.wrap_dataset(share.map(lambda record: record + 1))
        # Another dataset from the same source is a new share; shard_dataset=False shards nothing.
        assert list(context.wrap_dataset(tf.data.Dataset.range(4)).as_numpy_iterator()) == [1, 3]
        assert list(context.wrap_dataset(share, shard_dataset=False).as_numpy_iterator()) == [1, 3, 5, 7, 9]

    def test_make_metric_is_reachable_from_both_places(self):
        context = trial_context()
        with tf.Graph().as_default():
            values = tf.constant([1.0, 2.0])
            for make_metric in (context.make_metric, context.experimental.make_metric):
                value_op, update_op = make_metric(values, lambda batches: np.sum(batches), np.float32)
                assert value_op.dtype == tf.float32 and update_op.dtype == tf.int64

    def test_make_metric_type_errors_name_what_was_given(self):
        with (
            tf.Graph().as_default(),
            pytest.raises(
                TypeError, match=r"Received: metric\[0\]=\[<tf.Tensor.*\(nested structures are not supported\)"
            ),
        ):
            trial_context().experimental.make_metric([[tf.constant(1.0)]], np.sum, np.float32)

    def test_make_metric_refuses_a_reducer_that_returns_none_rather_than_reporting_nan(self):
        def mean_value(batches):
            np.mean(np.concatenate(batches))  # the return statement is missing

        with tf.Graph().as_default():
            value_op, update_op = trial_context().experimental.make_metric(
                tf.constant([1.0, 2.0]), mean_value, np.float64
            )
            with tf.compat.v1.Session() as session:
                session.run(update_op)
                with pytest.raises(tf.errors.OpError, match=r"the reducer function mean_value returned None instead"):
                    session.run(value_op)
        _root_cause.forget()


class TestTrialContext:
    def test_hyperparameters_batch_sizes_seed_and_config(self):
        context = trial_context(resources={"slots_per_trial": 2})
        assert context.get_hparam("lr") == 0.1
        assert context.get_hparam("model") == {"units": 8}
        assert context.get_hparams() == {"global_batch_size": 32, "lr": 0.1, "model": {"units": 8}}
        assert (context.get_global_batch_size(), context.get_per_slot_batch_size()) == (32, 16)
        assert context.get_trial_seed() == 3
        assert context.get_experiment_config()["searcher"]["metric"] == "loss"

    def test_hyperparameters_handed_out_are_copies(self):
        context = trial_context()
        context.get_hparam("model")["units"] = 1000
        context.get_hparams()["lr"] = 5
        assert context.get_hparam("model") == {"units": 8} and context.get_hparam("lr") == 0.1

    def test_an_undefined_hyperparameter_lists_the_defined_ones(self):
        message = "Hyperparameter 'dropout' is not defined in the experiment config; the defined hyperparameters are: "
        with pytest.raises(UndefinedHyperparameterError, match=message + "global_batch_size, lr, model"):
            trial_context().get_hparam("dropout")
        with pytest.raises(UndefinedHyperparameterError, match=message):
            trial_context().get_hparams()["dropout"]  # noqa: B018 -- the lookup is the test
        assert issubclass(UndefinedHyperparameterError, KeyError)  # code catching KeyError keeps working
        with pytest.raises(UndefinedHyperparameterError) as raised:
            trial_context().get_hparam("dropout")
        assert str(raised.value).startswith(message)  # the message itself, not KeyError's quoted repr


def test_trial_needs_its_three_builders():
    class Incomplete(det.EstimatorTrial):
        def build_estimator(self):
            return None

    with pytest.raises(TypeError, match="build_train_spec, build_validation_spec"):
        Incomplete(trial_context())


def test_serving_functions_default_to_none():
    class Complete(det.EstimatorTrial):
        def build_estimator(self):
            return None

        def build_train_spec(self):
            return None

        def build_validation_spec(self):
            return None

    trial = Complete(trial_context())
    assert trial.build_serving_input_receiver_fns() == {}
    assert trial.context.get_hparam("lr") == 0.1

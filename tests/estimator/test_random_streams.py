"""Random ops built from checkpointed generators: restored exactly, same distributions."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import gen_random_ops

from det_estimator.estimator._random_streams import restorable_random_ops, unrestorable_random_ops


def build_draws():
    """Every substituted draw, also inside a cond and a while loop; returns the tensors."""
    tf.compat.v1.set_random_seed(3)
    x = tf.ones([1000])
    draws = {
        "uniform": tf.random.uniform([1000]),
        "scaled_uniform": tf.random.uniform([1000], -2.0, 6.0, dtype=tf.float64),
        "integers": tf.random.uniform([1000], 0, 5, dtype=tf.int64),
        "normal": tf.random.normal([1000]),
        "truncated": tf.random.truncated_normal([1000]),
        "dropout": tf.nn.dropout(x, rate=0.5),
        "keras_dropout": tf.compat.v1.layers.dropout(x, rate=0.5, training=True),
        "in_cond": tf.cond(tf.constant(True), lambda: tf.random.uniform([3]), lambda: tf.zeros([3])),
        "in_loop": tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + tf.random.uniform([])), (0, 0.0))[1],
    }
    # A variable initialized at random: its initializer keeps TensorFlow's op.
    tf.compat.v1.get_variable("kernel", [4], initializer=tf.compat.v1.glorot_uniform_initializer())
    return draws


def run_steps(steps_before_restart, steps_after, directory):
    """Draws for steps_before_restart steps, checkpoints, restores in a new graph and draws on."""
    values = []
    with tf.Graph().as_default():
        with restorable_random_ops():
            draws = build_draws()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values += [session.run(draws) for _ in range(steps_before_restart)]
            saver.save(session, str(directory / "model"))
    with tf.Graph().as_default():
        with restorable_random_ops():
            draws = build_draws()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, str(directory / "model"))
            values += [session.run(draws) for _ in range(steps_after)]
    return values


def test_restored_draws_continue_where_the_saved_ones_stopped(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    straight = run_steps(4, 0, tmp_path / "a")
    resumed = run_steps(2, 2, tmp_path / "b")
    for step in range(4):
        for name in straight[step]:
            np.testing.assert_array_equal(resumed[step][name], straight[step][name], err_msg=f"{name}, step {step}")
    # And every step draws new numbers.
    assert not np.array_equal(straight[0]["uniform"], straight[1]["uniform"])


def test_draws_keep_their_distributions(tmp_path):
    values = run_steps(1, 0, tmp_path)[0]
    assert values["uniform"].min() >= 0.0 and values["uniform"].max() < 1.0
    assert abs(values["uniform"].mean() - 0.5) < 0.05
    assert values["scaled_uniform"].min() >= -2.0 and values["scaled_uniform"].max() < 6.0
    assert values["scaled_uniform"].dtype == np.float64
    assert set(np.unique(values["integers"])) == {0, 1, 2, 3, 4} and values["integers"].dtype == np.int64
    assert abs(values["normal"].mean()) < 0.15 and abs(values["normal"].std() - 1.0) < 0.1
    assert np.abs(values["truncated"]).max() <= 2.0
    for dropout in ("dropout", "keras_dropout"):
        assert set(np.unique(values[dropout])) == {0.0, 2.0}


def test_generators_hold_the_state_and_initializers_keep_tensorflow_ops():
    with tf.Graph().as_default() as graph:
        with restorable_random_ops():
            build_draws()
        state_variables = [v.name for v in tf.compat.v1.global_variables() if "StateVar" in v.name]
        assert len(state_variables) == 9, state_variables  # one per drawing op
        assert not [v for v in tf.compat.v1.trainable_variables() if "StateVar" in v.name]
        assert unrestorable_random_ops(graph) == []
        initializer_ops = [op.type for op in graph.get_operations() if op.name.startswith("kernel/Initializer/")]
        assert "RandomUniform" in initializer_ops


def test_outside_the_context_tensorflow_ops_are_built_and_eager_draws_are_untouched():
    with restorable_random_ops():
        eager = tf.random.uniform([2])  # executing eagerly: TensorFlow's own op
    assert eager.shape == (2,)
    assert gen_random_ops.random_uniform.__module__ == gen_random_ops.__name__
    with tf.Graph().as_default() as graph:
        tf.random.uniform([2], name="plain")
        tf.random.shuffle(tf.range(3), name="shuffled")
        with tf.compat.v1.variable_scope("layer"):
            tf.compat.v1.get_variable("w", [2], initializer=tf.compat.v1.random_normal_initializer())
        assert unrestorable_random_ops(graph) == ["plain/RandomUniform", "shuffled"]


def test_the_ops_are_put_back_when_building_fails():
    original = gen_random_ops.random_uniform
    with pytest.raises(RuntimeError, match="model_fn failed"), restorable_random_ops():
        raise RuntimeError("model_fn failed")
    assert gen_random_ops.random_uniform is original

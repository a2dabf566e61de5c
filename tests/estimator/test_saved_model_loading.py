"""Loading a checkpoint's SavedModel for inference: graph variables load without notices."""

import logging

import numpy as np
import tensorflow as tf

import det_estimator as det


def export_with_a_reference_variable(export_dir: str) -> None:
    """A SavedModel of y = 3x, written from a graph with a reference variable, as an Estimator in graph mode writes."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        weight = tf.compat.v1.Variable(3.0, use_resource=False, name="weight")
        session.run(weight.initializer)
        tf.compat.v1.saved_model.simple_save(session, export_dir, inputs={"x": x}, outputs={"y": x * weight})


def test_the_notice_for_each_reference_variable_is_left_out_and_the_model_predicts(tmp_path, caplog):
    export_with_a_reference_variable(str(tmp_path / "raw"))
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        loaded = det.estimator.load_estimator_from_checkpoint_path(str(tmp_path))

    assert "reference variable" not in caplog.text
    assert tf.get_logger().filters == []  # only while loading
    prediction = loaded.signatures["serving_default"](x=tf.constant([1.0, 2.0]))["y"].numpy()
    np.testing.assert_allclose(prediction, [3.0, 6.0])

"""HeartbeatHook: each validation step counts as progress for the launcher's hang watch."""

import tensorflow as tf

from det_estimator import _heartbeat


class HeartbeatHook(tf.estimator.SessionRunHook):
    """Counts every step of an evaluation as progress, so that a long validation is not taken for a hang."""

    def after_run(self, run_context: tf.estimator.SessionRunContext, run_values: tf.estimator.SessionRunValues) -> None:
        _heartbeat.beat()

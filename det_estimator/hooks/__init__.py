"""RunHook and the SessionRunHooks the training harness drives a trial with.

They are tf.estimator's ``SessionRunHook``: on the current stack (no tf.estimator) importing
this package raises :class:`~det_estimator.errors.EstimatorUnavailableError`.
"""

from det_estimator._stack import require_estimator

require_estimator("det_estimator.hooks (RunHook, a tf.estimator SessionRunHook)")

from det_estimator.hooks._run_hook import RunHook  # noqa: E402 -- after the check, which says what is missing

__all__ = ["RunHook"]

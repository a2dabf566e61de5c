"""RunHook and the SessionRunHooks the training harness drives a trial with."""

from det_estimator.hooks._run_hook import RunHook

__all__ = ["RunHook"]

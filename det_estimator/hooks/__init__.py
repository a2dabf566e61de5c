"""RunHook and the SessionRunHooks the training harness drives a trial with."""

__all__: list = []

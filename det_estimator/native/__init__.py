"""The native API: ``det.init()`` for a script that builds its own Estimator.

A script calls ``det.init(config, ...)`` first, builds its Estimator with the
returned context's wrappers and calls ``context.train_and_evaluate(estimator,
train_spec, eval_spec)``. ``local=True`` trains in the script's process;
``local=False`` records a tracked experiment and runs the script on the configured
number of processes, where ``det.init()`` returns each rank's context.
"""

from det_estimator.native._init import init

__all__ = ["init"]

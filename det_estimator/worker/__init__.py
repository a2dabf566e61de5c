"""The worker side: runs a trial class on this process, whatever its type, through the Core API.

``python -m det_estimator.worker`` is the one entry point of every launched process
that runs a trial class; ``run_trial`` and ``det.init(local=True)`` call
:func:`run_trial_class` in their own process instead.
"""

from det_estimator.worker._run import run_trial_class

__all__ = ["run_trial_class"]

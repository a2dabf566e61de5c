"""The new Keras API: ``context = det.keras.init()``, then ``context.fit(model, ...)`` in a plain Keras script.

A script written with it runs by hand like any Keras script, and as an experiment's
trial (``entrypoint_script: python3 train.py``) on one or several processes, with
metrics, checkpoints, pause, resume and hyperparameter search; a batch-inference script
runs as a job (``det-estimator job run``). Built on the Core API and
:class:`~det_estimator.keras.DeterminedCallback`.
"""

from det_estimator.keras._api._context import DistributedInfo, KerasContext, TrainingContext
from det_estimator.keras._api._fit import FitError
from det_estimator.keras._api._init import init
from det_estimator.keras._engine._format import CheckpointLoadError

__all__ = ["CheckpointLoadError", "DistributedInfo", "FitError", "KerasContext", "TrainingContext", "init"]

"""Every exception class of the package is a DetEstimatorError, keeping the built-in class that describes it."""

import json
import subprocess
import sys
import textwrap

import pytest

from det_estimator.checkpoint._metadata import InvalidCheckpointError
from det_estimator.errors import DetEstimatorError, PermanentTrialError, TrialLifecycleError
from det_estimator.reducers._accumulator import MetricReductionError

# Imports every module in a child (as tests/test_layering.py does) and lists the exception
# classes defined in the package that are not DetEstimatorErrors. Warnings are not errors.
_OUTSIDERS = textwrap.dedent(
    """
    import importlib, inspect, json, pkgutil
    import det_estimator
    from det_estimator._stack import has_estimator, needs_estimator
    from det_estimator.errors import DetEstimatorError

    outsiders = set()
    for module in pkgutil.walk_packages(det_estimator.__path__, "det_estimator."):
        if module.name.endswith("__main__"):
            continue
        if needs_estimator(module.name) and not has_estimator():
            continue  # refuses to import on the current stack (tests/test_layering.py checks how)
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            own = cls.__module__.startswith("det_estimator")
            if own and issubclass(cls, BaseException) and not issubclass(cls, (DetEstimatorError, Warning)):
                outsiders.add(f"{cls.__module__}.{cls.__qualname__}")
    print(json.dumps(sorted(outsiders)))
    """
)


def test_every_exception_class_of_the_package_is_a_det_estimator_error():
    result = subprocess.run(
        [sys.executable, "-c", _OUTSIDERS],
        capture_output=True,
        text=True,
        timeout=600,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_errors_keep_their_built_in_class():
    assert issubclass(InvalidCheckpointError, DetEstimatorError) and issubclass(InvalidCheckpointError, ValueError)
    assert issubclass(MetricReductionError, DetEstimatorError) and issubclass(MetricReductionError, RuntimeError)
    assert issubclass(TrialLifecycleError, PermanentTrialError) and issubclass(TrialLifecycleError, RuntimeError)


@pytest.mark.estimator
def test_both_trial_controllers_raise_the_one_trial_lifecycle_error():
    from det_estimator.estimator import _controller as estimator_controller
    from det_estimator.keras import _trial_controller as keras_controller

    assert estimator_controller.TrialLifecycleError is keras_controller.TrialLifecycleError is TrialLifecycleError

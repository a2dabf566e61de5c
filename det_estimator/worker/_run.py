"""Dispatch from a trial class to the controller of its type."""

from typing import Any, Callable, Optional

from det_estimator import core
from det_estimator.store import State


def _estimator_controller(trial_class: type, core_context: core.Context, context: Any) -> State:
    from det_estimator.estimator._controller import EstimatorTrialController

    return EstimatorTrialController(trial_class, core_context, context).run()


def _keras_controller(trial_class: type, core_context: core.Context, context: Any) -> State:
    from det_estimator.keras._controller import TFKerasTrialController

    return TFKerasTrialController(trial_class, core_context, context).run()


def _controllers() -> list[tuple[type, Callable[[type, core.Context, Any], State]]]:
    """Each trial base class with the controller that runs its subclasses."""
    from det_estimator.estimator import EstimatorTrial
    from det_estimator.keras import TFKerasTrial

    return [(EstimatorTrial, _estimator_controller), (TFKerasTrial, _keras_controller)]


def run_trial_class(trial_class: type, core_context: core.Context, context: Optional[Any] = None) -> State:
    """Runs ``trial_class`` with the controller of its type; returns the state it ended in.

    Raises:
        TypeError: ``trial_class`` is not a subclass of a trial type det-estimator runs.
    """
    for base, controller in _controllers():
        if isinstance(trial_class, type) and issubclass(trial_class, base):
            return controller(trial_class, core_context, context)
    kinds = ", ".join(base.__qualname__ for base, _ in _controllers())
    raise TypeError(
        f"The entrypoint {getattr(trial_class, '__qualname__', trial_class)!r} is not a trial class: it must "
        f"subclass one of {kinds}."
    )

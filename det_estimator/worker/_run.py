"""Dispatch from a trial class to the controller of its type."""

import inspect
from typing import Any, Callable, Optional

from det_estimator import core
from det_estimator._stack import has_estimator
from det_estimator.errors import TrialDefinitionError
from det_estimator.store import State


def _estimator_controller(trial_class: type, core_context: core.Context, context: Any) -> State:
    from det_estimator.estimator._controller import run_estimator_trial

    return run_estimator_trial(trial_class, core_context, context)


def _keras_controller(trial_class: type, core_context: core.Context, context: Any) -> State:
    from det_estimator.keras._trial_controller import run_keras_trial

    return run_keras_trial(trial_class, core_context, context)


def _controllers() -> list[tuple[type, Callable[[type, core.Context, Any], State]]]:
    """Each trial base class with the controller that runs its subclasses.

    Without tf.estimator (the current stack) there is no EstimatorTrial, and Keras trials run alone.
    """
    from det_estimator.keras import TFKerasTrial

    controllers: list[tuple[type, Callable[[type, core.Context, Any], State]]] = [(TFKerasTrial, _keras_controller)]
    if has_estimator():
        from det_estimator.estimator import EstimatorTrial

        controllers.insert(0, (EstimatorTrial, _estimator_controller))
    return controllers


def is_trial_class(trial_class: Any) -> bool:
    """Whether ``trial_class`` is a class of a trial type det-estimator runs."""
    return isinstance(trial_class, type) and any(issubclass(trial_class, base) for base, _ in _controllers())


def trial_kinds() -> str:
    """The trial base classes, for messages."""
    return ", ".join(base.__qualname__ for base, _ in _controllers())


def run_trial_class(trial_class: type, core_context: core.Context, context: Optional[Any] = None) -> State:
    """Runs ``trial_class`` with the controller of its type; returns the state it ended in.

    Raises:
        TypeError: ``trial_class`` is not a subclass of a trial type det-estimator runs.
        TrialDefinitionError: ``trial_class`` cannot be built: it leaves one of its
            base's abstract methods undefined, or its ``__init__`` does not take the context.
    """
    for base, controller in _controllers():
        if isinstance(trial_class, type) and issubclass(trial_class, base):
            check_constructible(trial_class, base)
            return controller(trial_class, core_context, context)
    kinds = ", ".join(base.__qualname__ for base, _ in _controllers())
    raise TypeError(
        f"The entrypoint {getattr(trial_class, '__qualname__', trial_class)!r} is not a trial class: it must "
        f"subclass one of {kinds}."
    )


def check_constructible(trial_class: type, base: type) -> None:
    """Refuses a trial class that cannot be built with its context, naming what is wrong.

    Python's own TypeError would come only when the controller builds the trial, as an
    error of no particular kind, so the trial would be restarted ``max_restarts`` times
    to fail the same way; a ``TrialDefinitionError`` ends it at once.
    """
    name = trial_class.__qualname__
    missing = sorted(getattr(trial_class, "__abstractmethods__", ()))
    if missing:
        methods = ", ".join(f"{method}()" for method in missing)
        raise TrialDefinitionError(
            f"The trial class {name} does not define {methods}, which every {base.__qualname__} must. "
            f"Define {'it' if len(missing) == 1 else 'them'} in {name}."
        )
    try:
        signature = inspect.signature(trial_class)
    except (TypeError, ValueError):  # no signature to read (a constructor written in C): let it be tried
        return
    try:
        signature.bind(object())
    except TypeError:
        raise TrialDefinitionError(
            f"The trial class {name} must take the trial's context as the one argument of its __init__, as "
            f"{base.__qualname__}.__init__(self, context) does. Received: {name}.__init__{signature}"
        ) from None

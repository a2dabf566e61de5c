"""Calling the user's model_fn and input_fn the way tf.estimator does."""

import inspect
from typing import Any, Callable


def call_with_accepted_arguments(function: Callable[..., Any], *args: Any, **candidates: Any) -> Any:
    """Calls ``function`` with ``args`` and those ``candidates`` its signature names.

    tf.estimator passes ``mode``, ``params``, ``config`` (and ``labels`` to a model_fn)
    only to functions that declare them; the controller's wrappers declare them all
    and hand on what the user's function takes.
    """
    accepted = inspect.signature(function).parameters
    return function(*args, **{name: value for name, value in candidates.items() if name in accepted})

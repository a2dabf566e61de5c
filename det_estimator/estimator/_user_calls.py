"""Calling the user's model_fn and input_fn the way tf.estimator does."""

from typing import Any, Callable

from tensorflow.python.util import function_utils


def call_with_accepted_arguments(function: Callable[..., Any], *args: Any, **candidates: Any) -> Any:
    """Calls ``function`` with ``args`` and those ``candidates`` its signature names.

    tf.estimator passes ``mode``, ``params``, ``config`` (and ``labels`` to a model_fn)
    only to functions that declare them; the controller's wrappers declare them all
    and hand on what the user's function takes. Which those are is decided by
    tf.estimator's own rule (``function_utils.fn_args``): an argument a
    ``functools.partial`` has bound already is not passed again, so that
    ``partial(input_fn, params=...)`` keeps its own ``params``.
    """
    accepted = function_utils.fn_args(function)
    return function(*args, **{name: value for name, value in candidates.items() if name in accepted})

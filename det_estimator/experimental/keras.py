"""``det.experimental.keras.init()``: the reference system's native Keras API, refused with what to use instead."""

from typing import Any, NoReturn

from det_estimator.errors import DetEstimatorError

__all__ = ["NativeKerasError", "init"]


class NativeKerasError(DetEstimatorError, NotImplementedError):
    """The reference system's native Keras API was called; det-estimator runs Keras models in other ways."""


def init(*args: Any, **kwargs: Any) -> NoReturn:
    """The reference system's native Keras API, which det-estimator does not provide.

    The reference ran a script's ``model.fit`` of a model passed through
    ``context.wrap_model()`` as an experiment. det-estimator covers that with the new
    Keras API (``det.keras.init()`` and ``context.fit(model, ...)``, by hand or as an
    experiment's ``entrypoint_script``), with ``det.keras.DeterminedCallback`` in the
    script's own ``model.fit``, or with a ``det.keras.TFKerasTrial``.

    Args:
        *args: the reference's arguments (``config``, ...), not read.
        **kwargs: likewise.

    Raises:
        NativeKerasError: always, naming those three ways.
    """
    raise NativeKerasError(
        "det.experimental.keras.init() is the reference system's native Keras API, which det-estimator does not "
        "provide. Use the new Keras API instead: context = det.keras.init(config=...), then "
        "context.fit(model, x, y, validation_data=...) (run the script by hand, or as an experiment's "
        "entrypoint_script); or pass det.keras.DeterminedCallback to your own model.fit; or write a "
        "det.keras.TFKerasTrial. See the README's Keras sections."
    )

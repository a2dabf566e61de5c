"""FitConfig: the model.fit() settings a trial chooses with context.configure_fit()."""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional


class _ArgNotProvided:
    """The default of an argument for which None is a meaningful value."""

    def __repr__(self) -> str:
        return "<not provided>"


NOT_PROVIDED: Any = _ArgNotProvided()


@dataclass(frozen=True)
class FitConfig:
    """What ``model.fit()`` would take, as the harness applies it.

    Attributes:
        verbose: the chief prints one line per workload and per validation.
        class_weight: class index to the weight of its examples' loss, in training.
        workers: threads or processes that read a ``keras.utils.Sequence`` ahead of
            training (0: read in the input pipeline itself).
        use_multiprocessing: read a Sequence in processes rather than threads.
        max_queue_size: batches of a Sequence read ahead at most.
        shuffle: shuffle NumPy records, and the order of a Sequence's batches, every
            epoch (with the trial seed); a ``tf.data.Dataset`` is left as it is.
        validation_steps: batches each process evaluates of a ``tf.data.Dataset``
            (None: until it ends).
    """

    verbose: bool = True
    class_weight: Optional[Mapping[Any, float]] = None
    workers: int = 1
    use_multiprocessing: bool = False
    max_queue_size: int = 10
    shuffle: bool = True
    validation_steps: Optional[int] = None

    def updated(self, **changes: Any) -> "FitConfig":
        """A copy with ``changes`` applied, each checked; arguments left as None or NOT_PROVIDED change nothing.

        Raises:
            TypeError: a value of the wrong type.
            ValueError: a number out of range.
        """
        kept = {}
        for name, value in changes.items():
            optional = name in ("class_weight", "validation_steps")
            if value is NOT_PROVIDED or (value is None and not optional):
                continue
            kept[name] = _checked(name, value)
        return dataclasses.replace(self, **kept)


def _checked(name: str, value: Any) -> Any:
    if name in ("verbose", "use_multiprocessing", "shuffle"):
        if not isinstance(value, (bool, int)):
            raise TypeError(f"Argument `{name}` must be a bool. Received: {name}={value!r}")
        return bool(value)
    if name == "class_weight":
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(
                f"Argument `class_weight` must be a dict of class index to weight, or None. Received: {value!r}"
            )
        return None if value is None else dict(value)
    minimum = {"workers": 0, "max_queue_size": 1, "validation_steps": 1}[name]
    if value is None:  # validation_steps=None: evaluate to the end
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"Argument `{name}` must be an integer of at least {minimum}. Received: {name}={value!r}")
    return value

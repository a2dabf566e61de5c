"""A Keras callback that records the order of its calls and checks that every begin has its end.

The rules are those Keras' own ``fit`` and ``evaluate`` keep, and the reference system's
callback-order checks assert: a batch's begin is followed by its end before anything
else of its phase, an evaluation's batches lie between its begin and its end, and
training's batches between ``on_train_begin`` and ``on_train_end``.
"""

from typing import Any, Optional

import tensorflow as tf

import det_estimator as det

# For each call, the calls it may follow within its own phase (None: the phase's first call).
TRAIN_RULES = {
    "train_begin": {None},
    "train_batch_begin": {"train_begin", "train_batch_end", "test_end"},
    "train_batch_end": {"train_batch_begin"},
    "train_end": {"train_begin", "train_batch_end", "test_end"},
}
TEST_RULES = {
    "test_begin": {None, "test_end"},
    "test_batch_begin": {"test_begin", "test_batch_end"},
    "test_batch_end": {"test_batch_begin"},
    "test_end": {"test_begin", "test_batch_end"},
}


class OrderError(AssertionError):
    """A callback was called out of Keras' order."""


def check_order(calls: list[str]) -> None:
    """Raises :class:`OrderError` naming the first call that breaks a rule of its phase."""
    for rules in (TRAIN_RULES, TEST_RULES):
        last: Optional[str] = None
        for index, call in enumerate(calls):
            if call not in rules:
                continue
            if last not in rules[call]:
                raise OrderError(f"call {index} ({call}) came after {last}: {calls}")
            last = call


def batches_per_evaluation(calls: list[str]) -> list[int]:
    """The number of batches of each evaluation in ``calls``, as their on_test_batch_end calls count them."""
    counts: list[int] = []
    for call in calls:
        if call == "test_begin":
            counts.append(0)
        elif call == "test_batch_end":
            counts[-1] += 1
    return counts


class OrderChecker(det.keras.callbacks.Callback):
    """Records its calls; at ``on_train_end`` raises :class:`OrderError` if they broke Keras' order.

    A ``det.keras.callbacks.Callback`` (so a trial's ``keras_callbacks()`` may return it),
    and so a plain Keras callback too.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def on_train_begin(self, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("train_begin")

    def on_train_batch_begin(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("train_batch_begin")

    def on_train_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("train_batch_end")

    def on_test_begin(self, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("test_begin")

    def on_test_batch_begin(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("test_batch_begin")

    def on_test_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("test_batch_end")

    def on_test_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("test_end")

    def on_train_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        self.calls.append("train_end")
        check_order(self.calls)


def plain_keras_calls(model: tf.keras.Model, *args: Any, **kwargs: Any) -> list[str]:
    """The calls a checker gets from a plain ``model.fit(*args, **kwargs)``."""
    checker = OrderChecker()
    model.fit(*args, callbacks=[checker], verbose=0, **kwargs)
    return checker.calls

"""The train function as the engine sees it: executions cut at any batch, stops agreed by every process, its input.

``model.fit`` calls the model's train function once per step (custom ``train_step``s
included). For a trial, :class:`Tap` stands in for it (:meth:`Tap.drive`): it calls it
for as many batches as the engine says (a workload's end may cut an execution of
``compile(steps_per_execution=n)`` short), and on several processes sums two flags over
them in the same compiled step, so that every process stops after the same batch. For a
script's ``fit``, it stands in for fit's train function when a resumed epoch must read
another iterator than fit's own, and keeps ``evaluate`` from running when a pause cuts
an epoch. Every change is undone when fit ends, and when the train function raises.
"""

import contextlib
from collections.abc import Iterator
from typing import Any, Callable, Optional

import tensorflow as tf

from det_estimator import _horovod
from det_estimator.errors import TrialLifecycleError
from det_estimator.keras._engine import _keras_compat


class Tap:
    """Runs ``model.make_train_function()`` for a number of batches, as ``model.fit`` would.

    On several processes, every call also sums two flags over all processes in the
    same compiled step (one small allreduce beside the gradients'): "pause requested"
    and "a callback set ``model.stop_training``". Every process then stops after the
    same batch, however the request reached it. One process needs no collective.

    Args:
        model: the compiled model.
        size: how many processes train (1: the flags are not exchanged).
    """

    def __init__(self, model: tf.keras.Model, size: int = 1) -> None:
        self._model = model
        self._function = _keras_compat.train_function(model)
        # compile(steps_per_execution=n) makes the train function run n batches per call.
        # Keras 2 reads it from a variable at every call; Keras 3 bakes it in, and a cut execution
        # runs a train function of one batch per call instead.
        self._per_execution = _keras_compat.steps_per_execution(model)
        self.batches_per_call = _keras_compat.batches_per_execution(model)
        self._one_batch: Optional[Callable[[Any], Any]] = None
        # Where Keras 3's train function of several batches fails (a strategy spanning
        # processes), every execution runs as calls of the one-batch train function that a
        # cut execution runs, batch by batch.
        self._executions_cut = _keras_compat.executions_of_several_batches_fail(model)
        self._agreeing = None
        if size > 1:

            def train_and_agree(iterator: Iterator, flags: tf.Tensor) -> tuple[Any, tf.Tensor]:
                logs = self._function(iterator)
                return logs, _horovod.allreduce_sum(flags, name="det_keras_stop_flags")

            self._agreeing = train_and_agree if model.run_eagerly else tf.function(train_and_agree)
        self._fit_function: Optional[Callable[[Any], Any]] = None

    @property
    def agrees(self) -> bool:
        """Whether the processes agree on their flags in the training step (Horovod's)."""
        return self._agreeing is not None

    def trace(self, dataset: tf.data.Dataset) -> None:
        """Traces the step for iterators of ``dataset``, not running it, which creates every variable it uses.

        No iterator is made: ``fit`` makes its own, which then runs the traced step.
        """
        spec = tf.data.IteratorSpec(dataset.element_spec)
        if self._agreeing is not None and isinstance(self._agreeing, tf.types.experimental.GenericFunction):
            self._agreeing.get_concrete_function(spec, tf.TensorSpec([2], tf.int32))
        elif isinstance(self._function, tf.types.experimental.GenericFunction):
            self._function.get_concrete_function(spec)

    def __call__(self, iterator: Iterator, batches: int, pause: bool, stop: bool) -> tuple[Any, bool, bool]:
        """Trains ``batches`` batches (at most :attr:`batches_per_call`); returns the logs and the agreed flags.

        On one process the flags are returned as given.
        """
        # The variable to set for this call, if it runs other than batches_per_call batches
        # (without steps_per_execution, batches_per_call and every call's batches are 1).
        if (batches != self.batches_per_call and _keras_compat.KERAS_3) or self._executions_cut:
            return self._cut(iterator, batches), pause, stop
        resized = self._per_execution if batches != self.batches_per_call else None
        if resized is not None:
            resized.assign(batches)
        try:
            if self._agreeing is None:
                return self._function(iterator), pause, stop
            logs, agreed = self._agreeing(iterator, tf.constant([int(pause), int(stop)], tf.int32))
            agreed = agreed.numpy()
            return logs, bool(agreed[0]), bool(agreed[1])
        finally:
            if resized is not None:
                resized.assign(self.batches_per_call)

    def _cut(self, iterator: Iterator, batches: int) -> Any:
        """Keras 3: ``batches`` batches, one call of a one-batch train function each.

        An execution cut short, or any under a strategy spanning processes. Not on several
        Horovod processes, which agree on their flags in the execution's step.
        """
        if self._agreeing is not None:
            raise TrialLifecycleError(
                "compile(steps_per_execution=n) with n > 1 on several Horovod processes needs Keras 2 (tf-keras): "
                "under Keras 3 a workload cannot end inside an execution there. Compile with steps_per_execution=1."
            )
        if self._one_batch is None:
            self._one_batch = _keras_compat.one_batch_train_function(self._model)
        logs = None
        for _ in range(batches):
            logs = self._one_batch(iterator)
        return logs

    # ----- inside model.fit -----

    def read_first(
        self, iterator_of: Callable[[Any], Any], calls: Optional[int] = None, on_end: Callable[[], None] = lambda: None
    ) -> None:
        """Makes fit's next step read ``iterator_of(fit's iterator)``, and the steps after it too, to the epoch's end.

        ``calls``: the steps the epoch has left, when known; the one after them ends the epoch
        as the data's end does, without running (a step that reads past the end still runs
        what does not wait for the read: Keras 3's seed generators draw once more), after
        calling ``on_end``. Fit's own iterator too (a distributed dataset's, or the first
        epoch's) is read through the count then: Keras 3 starts the resumed epoch at its first
        step, and would otherwise read past the end. When ``iterator_of`` returns fit's own
        iterator and the steps are not known, fit's train function is put back at once.
        """
        model = self._model
        function = model.train_function
        self._fit_function = function
        made = [0]

        def step(substitute: Any) -> Any:
            if calls is not None and made[0] >= calls:
                self.end_epoch()
                on_end()
                raise tf.errors.OutOfRangeError(None, None, "the resumed epoch's batches are all trained")
            made[0] += 1
            return self._undone_if_raising(function, substitute)

        def first_step(iterator: Any) -> Any:
            substitute = self._undone_if_raising(iterator_of, iterator)
            if substitute is iterator and calls is None:
                self.end_epoch()
                return self._undone_if_raising(function, substitute)
            # Keras hands over its own iterator at every step of the epoch: read this one instead.
            model.train_function = lambda _: step(substitute)
            return step(substitute)

        model.train_function = first_step

    def drive(self, step: Callable[[Any], Any]) -> None:
        """Makes fit call ``step(iterator)`` at every step instead of its train function, until :meth:`undo`."""
        self._fit_function = self._model.train_function
        self._model.train_function = lambda iterator: self._undone_if_raising(step, iterator)

    def skip_evaluation(self) -> None:
        """Makes the ``evaluate`` fit runs at this epoch's end do nothing (a pause cut the epoch)."""
        self._model.evaluate = _skip_evaluation

    def end_epoch(self) -> None:
        """Gives fit its own train function back (the next epochs read the iterators fit makes)."""
        if self._fit_function is not None:
            self._model.train_function = self._fit_function
            self._fit_function = None

    def undo(self) -> None:
        """Undoes every change to the model: fit's train function and ``evaluate`` are the model's own again."""
        self.end_epoch()
        if "evaluate" in vars(self._model):
            del self._model.evaluate

    def _undone_if_raising(self, function: Callable[[Any], Any], argument: Any) -> Any:
        try:
            return function(argument)
        except BaseException:
            # Keras ends fit without on_train_end: the model must not keep a stand-in.
            self.undo()
            raise


@contextlib.contextmanager
def one_step_per_execution(model: tf.keras.Model) -> Iterator[None]:
    """Evaluates one batch per call, whatever ``compile(steps_per_execution=...)`` says.

    The validation data has no known length (see ``_inputs.ValidationData``), and Keras
    refuses data of unknown length with ``steps_per_execution > 1`` unless told the
    steps, which a process's share of a Sequence or a dataset does not tell.
    """
    if _keras_compat.KERAS_3:
        # Keras 3 would take data of unknown length, but its test function of several batches
        # fails under a strategy spanning processes (executions_of_several_batches_fail).
        with _keras_compat.one_batch_evaluation(model):
            yield
        return
    steps = _keras_compat.steps_per_execution(model)
    saved = int(steps.numpy()) if steps is not None else 1
    if steps is None or saved == 1:
        yield
        return
    steps.assign(1)
    try:
        yield
    finally:
        steps.assign(saved)


def _skip_evaluation(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Stands in for ``model.evaluate`` in the epoch a pause interrupts: no validation of a partial epoch."""
    return {}

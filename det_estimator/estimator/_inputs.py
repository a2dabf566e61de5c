"""The controller's view of the trial's input functions."""

from typing import Any, Callable, Optional

import tensorflow as tf

from det_estimator.errors import TrialDefinitionError
from det_estimator.estimator._user_calls import call_with_accepted_arguments

InputFn = Callable[..., tf.data.Dataset]


def _call_user_input_fn(input_fn: InputFn, which: str, passed: dict) -> tf.data.Dataset:
    dataset = call_with_accepted_arguments(input_fn, **passed)
    if not isinstance(dataset, tf.data.Dataset):
        raise TrialDefinitionError(
            f"The input_fn of {which} must return a tf.data.Dataset (of (features, labels) or features). "
            f"Received: {type(dataset).__name__}"
        )
    return dataset


def training_input_fn(input_fn: InputFn, batches_to_skip: int) -> InputFn:
    """The training input: the user's dataset repeated, resumed after ``batches_to_skip`` batches.

    Repeating lets ``searcher.max_length``, not the dataset's size, decide when training
    ends. A resume restores the iterator's saved state when the checkpoint has it (and
    ``batches_to_skip`` is 0); otherwise skipping the batches this process already
    trained on makes it see exactly the batch that would have come next, as long as the
    input pipeline is deterministic for the trial seed (shuffles seeded from it, as by
    default). The skip is always there, of 0 batches at times, so that the pipeline has
    the same structure in every run and a saved iterator state fits it.
    """

    def resumable_input_fn(mode: Any, params: Any, config: Any) -> tf.data.Dataset:
        passed = {"mode": mode, "params": params, "config": config}
        return _call_user_input_fn(input_fn, "build_train_spec()", passed).repeat().skip(batches_to_skip)

    return resumable_input_fn


def validation_input_fn(input_fn: InputFn, steps: Optional[int]) -> InputFn:
    """The user's validation input, checked to be a ``tf.data.Dataset`` that ends when ``steps`` is None.

    Args:
        input_fn: The ``EvalSpec``'s input_fn.
        steps: The batches each process evaluates; None to evaluate the whole dataset.

    Raises:
        TrialDefinitionError: (from the returned function) not a dataset, or, with
            ``steps`` None, a dataset TensorFlow knows to be infinite (a ``repeat()``
            without a count), whose evaluation would never end.
    """

    def checked_input_fn(mode: Any, params: Any, config: Any) -> tf.data.Dataset:
        passed = {"mode": mode, "params": params, "config": config}
        dataset = _call_user_input_fn(input_fn, "build_validation_spec()", passed)
        if steps is None and _cardinality(dataset) == tf.data.INFINITE_CARDINALITY:
            raise TrialDefinitionError(
                "The input_fn of build_validation_spec() returns an infinite tf.data.Dataset (a repeat() without "
                "a count?) and its EvalSpec has steps=None: validation would never end. Do not repeat the "
                "validation data, or set how many batches each process evaluates with EvalSpec(input_fn, steps=N)."
            )
        return dataset

    return checked_input_fn


def _cardinality(dataset: tf.data.Dataset) -> int:
    """The dataset's number of elements as TensorFlow knows it (or UNKNOWN_CARDINALITY), without iterating it.

    Input functions run in the Estimator's graph, where the cardinality is a tensor: it is
    computed in a session of its own, which runs the dataset's definition only.
    """
    cardinality = dataset.cardinality()
    if tf.executing_eagerly():
        return int(cardinality)
    config = tf.compat.v1.ConfigProto(device_count={"GPU": 0})
    try:
        with tf.compat.v1.Session(graph=cardinality.graph, config=config) as session:
            return int(session.run(cardinality))
    except tf.errors.OpError:  # a dataset defined from a placeholder, say: its length is not known here
        return int(tf.data.UNKNOWN_CARDINALITY)

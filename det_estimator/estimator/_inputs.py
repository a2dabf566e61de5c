"""The controller's view of the trial's input functions."""

from typing import Any, Callable

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


def validation_input_fn(input_fn: InputFn) -> InputFn:
    """The user's validation input, checked to be a ``tf.data.Dataset``."""

    def checked_input_fn(mode: Any, params: Any, config: Any) -> tf.data.Dataset:
        passed = {"mode": mode, "params": params, "config": config}
        return _call_user_input_fn(input_fn, "build_validation_spec()", passed)

    return checked_input_fn

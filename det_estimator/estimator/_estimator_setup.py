"""Turns the user's Estimator into the one the controller runs.

The user's Estimator keeps its model_fn, params and warm-start settings; the
controller supplies the run configuration (a private model_dir per process, the
trial seed, no automatic checkpoints since the controller takes them, one device per
process) and wraps the model_fn to learn what it needs from each graph.
"""

import contextlib
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

import tensorflow as tf

from det_estimator.core import DistributedContext
from det_estimator.errors import TrialDefinitionError
from det_estimator.estimator._random_streams import restorable_random_ops, unrestorable_random_ops
from det_estimator.estimator._user_calls import call_with_accepted_arguments
from det_estimator.reducers._make_metric import accumulator_of

# eval_metric_ops key under which each rank counts the examples it evaluated; the
# controller removes it from the results after weighting the other metrics by it.
EXAMPLES_KEY = "det_estimator/examples"


class GraphRecorder:
    """What the wrapped model_fn built: training-loss accumulators, and which metrics are global.

    Attributes:
        loss_sum: a local variable summing the training loss over the batches since the
            controller last reset it (None until the training graph is built).
        loss_batches: how many batches ``loss_sum`` holds.
        global_metric_keys: eval_metric_ops keys made by make_metric, whose values are
            already reduced over all ranks.
    """

    def __init__(self) -> None:
        self.loss_sum: Optional[tf.Variable] = None
        self.loss_batches: Optional[tf.Variable] = None
        self.global_metric_keys: set[str] = set()


def rebuild_estimator(
    estimator: tf.estimator.Estimator,
    model_dir: str,
    seed: int,
    distributed: DistributedContext,
    recorder: GraphRecorder,
) -> tf.estimator.Estimator:
    """A new Estimator with the user's model and the controller's run configuration.

    The new Estimator is a plain ``tf.estimator.Estimator``: a subclass's behaviour
    would be lost, so a subclass that overrides any method of ``Estimator`` (other than
    ``__init__``) is refused. Premade estimators (``DNNClassifier``, ...) only set up
    their model_fn in ``__init__`` and run unchanged.

    Raises:
        TypeError: ``estimator`` is not a ``tf.estimator.Estimator``, or a subclass that
            overrides its methods.
    """
    # tf.compat.v1.estimator.Estimator is the base class of tf.estimator.Estimator: the
    # TF1 premade estimators (tf.compat.v1.estimator.DNNClassifier, ...) are only that.
    kind = type(estimator)
    if not isinstance(estimator, tf.compat.v1.estimator.Estimator):
        raise TrialDefinitionError(
            "build_estimator() must return a tf.estimator.Estimator (or tf.compat.v1.estimator.Estimator). "
            f"Received: {kind.__module__}.{kind.__qualname__}"
        )
    overridden = overridden_estimator_methods(kind)
    if overridden:
        raise TrialDefinitionError(
            f"build_estimator() returned a {kind.__qualname__}, a subclass of tf.estimator.Estimator that overrides "
            f"{', '.join(overridden)}. det-estimator runs the estimator's model_fn, params and config in an "
            "Estimator of its own, so those overrides would be silently lost. Move that behaviour into the "
            "model_fn (or into hooks), and return a tf.estimator.Estimator(model_fn=...)."
        )
    config = estimator.config.replace(
        model_dir=model_dir,
        tf_random_seed=seed,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        session_config=_session_config(estimator.config.session_config, distributed),
    )
    params = dict(estimator.params) if estimator.params else None
    _discard_automatic_model_dir(estimator.model_dir)
    return tf.estimator.Estimator(
        model_fn=_wrap_model_fn(estimator.model_fn, recorder, warn=distributed.rank == 0),
        config=config,
        params=params,
        warm_start_from=getattr(estimator, "_warm_start_settings", None),
    )


def _discard_automatic_model_dir(model_dir: Optional[str]) -> None:
    """Removes the empty folder TensorFlow made for an Estimator built without a model_dir.

    ``tf.estimator.Estimator(model_fn)`` makes one with ``tempfile.mkdtemp()``, the usual
    way in a trial (the reference system chose the model_dir too). The rebuilt Estimator
    runs in the controller's model_dir, so that folder would be left behind, empty, by
    every run. Only an empty folder named as ``mkdtemp`` names them is removed.
    """
    if not model_dir:
        return
    path = Path(model_dir)
    if path.parent != Path(tempfile.gettempdir()) or not path.name.startswith("tmp"):
        return
    with contextlib.suppress(OSError):
        path.rmdir()  # refuses a folder that holds anything


# The rebuilt Estimator reads the user's `model_fn` (so overriding it works), and never asks
# for `latest_checkpoint`: these overrides lose nothing.
_HARMLESS_OVERRIDES = {"__init__", "model_fn", "latest_checkpoint"}


def overridden_estimator_methods(kind: type) -> list[str]:
    """The methods of ``tf.estimator.Estimator`` that ``kind`` or its bases redefine and the rebuild would lose.

    TensorFlow itself refuses most overrides when the Estimator is built; among those
    it lets through, ``_create_and_assert_global_step`` and ``_export_all_saved_models``
    would be lost, as would any override in an intermediate base class.
    """
    bases = (tf.estimator.Estimator, tf.compat.v1.estimator.Estimator)
    inherited = {
        name for base in bases for name, value in vars(base).items() if callable(value) or isinstance(value, property)
    }
    overridden: set[str] = set()
    for klass in kind.__mro__:
        if klass in bases or klass is object:
            break
        overridden.update(name for name in vars(klass) if name in inherited and name not in _HARMLESS_OVERRIDES)
    return sorted(overridden)


def _session_config(user_config: Optional[tf.compat.v1.ConfigProto], distributed: DistributedContext):
    config = tf.compat.v1.ConfigProto()
    if user_config is not None:
        config.CopyFrom(user_config)
    config.allow_soft_placement = True
    if distributed.size > 1:
        # One GPU per process: the one of its local rank, as Keras trials pin theirs. With
        # more processes on the machine than GPUs they share them in turn: a GPU number
        # past the last one would stop TensorFlow from making the session at all.
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            config.gpu_options.visible_device_list = str(distributed.local_rank % len(gpus))
    return config


def _wrap_model_fn(model_fn: Callable[..., tf.estimator.EstimatorSpec], recorder: GraphRecorder, warn: bool):
    def model_fn_with_bookkeeping(features, labels, mode, params, config):
        def call_user_model_fn():
            return call_with_accepted_arguments(
                model_fn, features, labels=labels, mode=mode, params=params, config=config
            )

        if mode == tf.estimator.ModeKeys.TRAIN:
            # Only the training graph: its random state is what a resume must restore. The
            # evaluation and export graphs must not gain variables the checkpoint lacks.
            with restorable_random_ops():
                spec = call_user_model_fn()
            if warn:
                _warn_of_unrestorable_random_ops(tf.compat.v1.get_default_graph())
            spec = spec._replace(train_op=_accumulating_loss(spec, recorder))
            return spec
        spec = call_user_model_fn()
        if mode == tf.estimator.ModeKeys.EVAL:
            spec = spec._replace(eval_metric_ops=_eval_metric_ops(spec, features, labels, recorder))
        return spec

    return model_fn_with_bookkeeping


def _warn_of_unrestorable_random_ops(graph: tf.Graph) -> None:
    names = unrestorable_random_ops(graph)
    if names:
        shown = ", ".join(repr(name) for name in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        warnings.warn(
            f"The training graph has {len(names)} random op(s) whose state no checkpoint can hold ({shown}): "
            "after a resume they draw from their seed again, so a resumed trial trains differently from an "
            "uninterrupted one. Uniform, normal and truncated normal draws (tf.random.*, dropout) are restored; "
            "draw from a tf.random.Generator instead of tf.random.shuffle, tf.random.categorical and the like.",
            RuntimeWarning,
            stacklevel=2,
        )


def _accumulating_loss(spec: tf.estimator.EstimatorSpec, recorder: GraphRecorder) -> tf.Operation:
    """The train op, also adding the batch's loss to in-graph sums.

    Summing in the graph costs nothing measurable per step, where fetching the loss
    into Python every step would; the controller reads the sums once per workload.
    """
    local = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
    recorder.loss_sum = tf.compat.v1.Variable(
        0.0, dtype=tf.float64, trainable=False, collections=local, name="det_estimator_loss_sum"
    )
    recorder.loss_batches = tf.compat.v1.Variable(
        0, dtype=tf.int64, trainable=False, collections=local, name="det_estimator_loss_batches"
    )
    return tf.group(
        spec.train_op,
        recorder.loss_sum.assign_add(tf.cast(spec.loss, tf.float64)),
        recorder.loss_batches.assign_add(1),
    )


def _eval_metric_ops(spec: tf.estimator.EstimatorSpec, features: Any, labels: Any, recorder: GraphRecorder) -> dict:
    metric_ops = dict(spec.eval_metric_ops or {})
    for key, metric in metric_ops.items():
        value_op = metric[0] if isinstance(metric, (tuple, list)) else None
        accumulator = accumulator_of(value_op)
        if accumulator is not None:
            accumulator.name = key
            recorder.global_metric_keys.add(key)
    examples = tf.compat.v1.Variable(
        0,
        dtype=tf.int64,
        trainable=False,
        name="det_estimator_examples",
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.METRIC_VARIABLES],
    )
    batch_size = tf.shape(_first_tensor(labels, features), out_type=tf.int64)[0]
    metric_ops[EXAMPLES_KEY] = (tf.identity(examples), examples.assign_add(batch_size))
    return metric_ops


def _first_tensor(*structures: Any) -> tf.Tensor:
    for structure in structures:
        for tensor in tf.nest.flatten(structure):
            if tf.is_tensor(tensor) and tensor.shape.rank != 0:
                return tensor
    raise ValueError("The validation input has no batched tensor to count examples from.")

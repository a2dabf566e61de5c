"""Every use of Keras' (and tf.distribute's) internals, one function each, with its Keras 3 counterpart.

det-estimator runs on Keras 2 (``tf.keras`` of TensorFlow 2.15, or tf-keras under
``TF_USE_LEGACY_KERAS=1`` on a later TensorFlow) and, where ported, on Keras 3 (``tf.keras``
of TensorFlow 2.16 and later). What the public API does not give is reached here and
nowhere else. Each function's docstring names what Keras 3 offers instead; those already
ported branch on :data:`KERAS_3`.
"""

import contextlib
import importlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Optional

import tensorflow as tf

# Keras 3 alone has a __version__ on tf.keras (Keras 2's is on the keras or tf_keras package).
KERAS_3 = str(getattr(tf.keras, "__version__", "2")).startswith("3.")
# The package of Keras 2's internals: keras with TensorFlow 2.15, tf_keras under TF_USE_LEGACY_KERAS=1.
KERAS_2_PACKAGE = "tf_keras" if tf.keras.__name__.startswith("tf_keras") else "keras"


def keras_version() -> str:
    """The version of the Keras that ``tf.keras`` is (Keras 3, tf-keras or TensorFlow 2.15's keras)."""
    if KERAS_3:
        return str(tf.keras.__version__)
    return str(importlib.import_module(KERAS_2_PACKAGE).__version__)


def _keras_2_module(name: str) -> Any:
    """A module of Keras 2's internals (``src.saving.legacy.saving_utils``, ...) in the package tf.keras is."""
    return importlib.import_module(f"{KERAS_2_PACKAGE}.{name}")


# ----- the model -----


def is_compiled(model: tf.keras.Model) -> bool:
    """Whether ``model.compile()`` was called. Keras 3: ``model.compiled``, public."""
    if KERAS_3:
        return bool(getattr(model, "compiled", False))
    return bool(getattr(model, "_is_compiled", False))


def metrics_given_to_compile(model: tf.keras.Model) -> list[Any]:
    """The metrics (weighted ones too) given to ``compile()``; before the first step Keras lists none built.

    Keras 3: ``model._compile_metrics``, with the same two lists.
    """
    # Keras 3 keeps them on its CompileMetrics, Keras 2 on its MetricsContainer.
    container = getattr(model, "_compile_metrics" if KERAS_3 else "compiled_metrics", None)
    return [
        *tf.nest.flatten(getattr(container, "_user_metrics", None) or []),
        *tf.nest.flatten(getattr(container, "_user_weighted_metrics", None) or []),
    ]


def architecture_json(model: tf.keras.Model) -> str:
    """The model's architecture as ``model.to_json()`` gives it, without how it was compiled.

    Keras 3: ``to_json`` adds the compile config, where a metric or loss of the trial's own
    that has no ``get_config`` fails it; rebuilding the model for inference needs none of
    it, so the model's ``get_compile_config`` is shadowed for the call (Keras 2 leaves it out).
    """
    if not KERAS_3:
        return model.to_json()
    model.get_compile_config = lambda: None
    try:
        return model.to_json()
    finally:
        del model.get_compile_config


def model_without_optimizer(model: tf.keras.Model) -> tf.train.Checkpoint:
    """A view of the model's checkpointed parts without its optimizer, to read weights into and keep the optimizer.

    Keras 3: the same ``_trackable_children`` of TensorFlow's trackables, to verify there.
    """
    parts = dict(model._trackable_children(save_type="checkpoint"))
    parts.pop("optimizer", None)
    return tf.train.Checkpoint(**parts)


def build_optimizer(optimizer: Any, variables: list[Any]) -> None:
    """Creates an optimizer's slot variables for ``variables`` (Keras 2.11+ optimizers, and legacy ones).

    Keras 3: ``optimizer.build(variables)``, public.
    """
    # Keras 3 has no legacy optimizers (tf.keras.optimizers.legacy is Keras 2's).
    if KERAS_3 or (hasattr(optimizer, "build") and not isinstance(optimizer, tf.keras.optimizers.legacy.Optimizer)):
        optimizer.build(variables)
    elif hasattr(optimizer, "_create_all_weights"):
        optimizer._create_all_weights(variables)


def train_function(model: tf.keras.Model) -> Callable[[Any], Any]:
    """The model's train function (one call per execution of ``steps_per_execution`` batches), made if need be.

    Keras 3: ``make_train_function()`` sets ``model.train_function`` and returns None.
    """
    made = model.make_train_function()
    return made if made is not None else model.train_function


def batches_per_execution(model: tf.keras.Model) -> int:
    """How many batches one call of the train function trains (``compile(steps_per_execution=n)``)."""
    if KERAS_3:
        return int(model.steps_per_execution or 1)
    steps = steps_per_execution(model)
    return 1 if steps is None else int(steps.numpy())


def one_batch_train_function(model: tf.keras.Model) -> Callable[[Any], Any]:
    """Keras 3: a train function that trains one batch per call, beside the model's own of ``steps_per_execution``.

    Keras 3 reads ``steps_per_execution`` when it traces the train function, so the
    attribute is 1 while this one is made and whenever it runs (a retrace then bakes 1 in
    too); the model's own train function and attribute are left as they were.
    """
    steps, own = model.steps_per_execution, model.train_function
    model.steps_per_execution = 1
    try:
        model.make_train_function(force=True)
        one_batch = model.train_function
    finally:
        model.steps_per_execution, model.train_function = steps, own

    def train_one_batch(iterator: Any) -> Any:
        saved = model.steps_per_execution
        model.steps_per_execution = 1
        try:
            return one_batch(iterator)
        finally:
            model.steps_per_execution = saved

    return train_one_batch


# Keras 3: each model's test function of one batch per call, traced once (see one_batch_evaluation).
_ONE_BATCH_TEST_FUNCTIONS: "weakref.WeakKeyDictionary[Any, Callable[[Any], Any]]" = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def one_batch_evaluation(model: tf.keras.Model) -> Iterator[None]:
    """Keras 3: while inside, ``evaluate`` runs one batch per call of its test function.

    That function is traced with ``steps_per_execution=1`` at the first use, and kept; the
    model's own is put back on leaving. Keras 3 reads ``steps_per_execution`` when it traces
    the test function and when it counts an evaluation's steps, so both change while inside.
    """
    steps, own = model.steps_per_execution, model.test_function
    if (steps or 1) == 1:
        yield
        return
    model.steps_per_execution = 1
    try:
        one_batch = _ONE_BATCH_TEST_FUNCTIONS.get(model)
        if one_batch is None:
            model.make_test_function(force=True)
            one_batch = _ONE_BATCH_TEST_FUNCTIONS[model] = model.test_function
        model.test_function = one_batch
        yield
    finally:
        model.steps_per_execution, model.test_function = steps, own


def steps_per_execution(model: tf.keras.Model) -> Optional[tf.Variable]:
    """The variable of ``compile(steps_per_execution=n)``, which the train function reads at every call.

    Keras 3: an int baked into the traced function; cutting an execution takes a second
    train function traced with ``steps_per_execution=1``.
    """
    return getattr(model, "_steps_per_execution", None)


def inputs_known(model: tf.keras.Model) -> bool:
    """Whether the model's input specs are known (it was built on inputs, or called once), so it can be exported.

    Keras 2: ``model.save_spec()``. Keras 3: the specs its own export reads (``keras.export``).
    """
    if not KERAS_3:
        return model.save_spec() is not None
    from keras.src.export.export_utils import get_input_signature

    try:
        get_input_signature(model)
    except (ValueError, TypeError):
        return False
    return True


def serving_signature(model: tf.keras.Model) -> Any:
    """The ``serving_default`` function Keras' own SavedModel export traces (inference, ``training=False``).

    Keras 3: the input signature ``keras.export.ExportArchive`` uses, with the outputs named
    as Keras 2 names them (by the model's output names).
    """
    if not KERAS_3:
        return _keras_2_module("src.saving.legacy.saving_utils").trace_model_call(model)
    from keras.src.export.export_utils import get_input_signature, make_tf_tensor_spec

    signature = [tf.nest.map_structure(make_tf_tensor_spec, spec) for spec in get_input_signature(model)]
    names = list(getattr(model, "output_names", None) or [])

    def serve(*inputs: Any) -> Any:
        outputs = model(*inputs, training=False)
        if isinstance(outputs, dict):
            return outputs
        flat = tf.nest.flatten(outputs)
        keys = names if len(names) == len(flat) else [f"output_{index}" for index in range(len(flat))]
        return dict(zip(keys, flat))

    return tf.function(serve, input_signature=signature)


# ----- fit's callbacks -----


def untimed_callbacks(callbacks: list[tf.keras.callbacks.Callback], model: tf.keras.Model) -> Any:
    """``callbacks`` as ``fit`` calls them, without Keras' check that batch hooks are fast.

    A driver that validates and checkpoints in ``on_train_batch_end`` would be reported
    as slow over the first batches. ``fit`` takes the list as it is (no History, no
    progress bar). Keras 3: a plain list; its ``CallbackList`` times nothing.
    """
    if KERAS_3:
        return list(callbacks)  # fit makes its CallbackList (with the History fit returns)
    callback_list = tf.keras.callbacks.CallbackList(callbacks, model=model)
    callback_list._check_timing = False
    return callback_list


# ----- where fit starts -----


def fit_start(model: tf.keras.Model) -> Any:
    """What ``fit`` asks for the epoch and batch to start at (``BackupAndRestore``'s or ours); None if nothing.

    Keras 3: ``model._initial_epoch`` only (epochs, not batches): ours, as :func:`set_fit_start`
    left it, or the epoch ``BackupAndRestore`` set.
    """
    if KERAS_3:
        return getattr(model, "_det_fit_start", None) or getattr(model, "_initial_epoch", None) or None
    return getattr(model, "_training_state", None)


def set_fit_start(model: tf.keras.Model, start: Any) -> None:
    """Makes the next ``fit`` start where ``start.maybe_load_initial_counters_from_ckpt`` says; None to clear.

    Keras 3: ``fit`` starts at ``model._initial_epoch``; the batch in it is the engine's to
    skip (``Tap.read_first``), and the epoch's steps end when that iterator runs out.
    """
    if KERAS_3:
        model._det_fit_start = start
        model._initial_epoch = None if start is None else start.epoch
        return
    model._training_state = start


def first_batch_index_of_resumed_epoch(batch: int) -> int:
    """The index ``fit`` gives the first batch it trains of an epoch resumed after ``batch`` batches.

    Keras 2 counts on from the batch its training state said (``batch``); Keras 3 starts
    every epoch at 0, its resumed one too.
    """
    return 0 if KERAS_3 else batch


# ----- random generators of layers -----


def enable_layer_generators() -> bool:
    """Makes Keras 2 layers built from now on draw from ``tf.random.Generator`` objects; returns the previous setting.

    Keras 3: nothing to do, and True: its layers draw from ``keras.random.SeedGenerator``
    objects, whose states are variables (see :func:`generator_of`).
    """
    if KERAS_3:
        return True
    previous = tf.keras.backend.experimental.is_tf_random_generator_enabled()
    tf.keras.backend.experimental.enable_tf_random_generator()
    return bool(previous)


def disable_layer_generators() -> None:
    """Undoes :func:`enable_layer_generators` (Keras 2). Keras 3: nothing to undo."""
    if not KERAS_3:
        tf.keras.backend.experimental.disable_tf_random_generator()


def random_layers(model: tf.keras.Model) -> list[tuple[Any, Any]]:
    """``(layer, its random generator)`` for each of the model's layers that draws random numbers.

    Keras 2: each layer's ``RandomGenerator``. Keras 3: each ``keras.random.SeedGenerator`` of
    each layer (``layer._seed_generators``); Keras 3 models have no ``submodules``.
    """
    if KERAS_3:
        layers = model._flatten_layers(include_self=True, recursive=True)
        return [(layer, seed) for layer in layers for seed in getattr(layer, "_seed_generators", None) or []]
    pairs = [(module, getattr(module, "_random_generator", None)) for module in [model, *model.submodules]]
    return [(module, random_generator) for module, random_generator in pairs if random_generator is not None]


def create_generator(random_generator: Any) -> None:
    """Creates a layer's ``tf.random.Generator`` now (Keras does at the layer's first call). Keras 3: nothing to do."""
    if hasattr(random_generator, "_maybe_init"):
        random_generator._maybe_init()


class SeedState(tf.Module):
    """A Keras 3 ``SeedGenerator``'s state variable, trackable, under the name a ``tf.random.Generator`` gives it.

    Keras 3 seed generators are not TensorFlow trackables: a ``tf.train.Checkpoint`` of the
    model leaves their states out, so the checkpoint holds them through these.
    """

    def __init__(self, state: tf.Variable) -> None:
        super().__init__()
        self.state = state


def generator_of(random_generator: Any) -> Optional[Any]:
    """What a checkpoint holds of a layer's generator: its ``tf.random.Generator``, if it has one yet.

    Keras 3: its ``SeedGenerator``'s state variable, as a :class:`SeedState`.
    """
    if KERAS_3:
        state = getattr(getattr(random_generator, "state", None), "value", None)
        return SeedState(state) if isinstance(state, tf.Variable) else None
    generator = getattr(random_generator, "_generator", None)
    return generator if isinstance(generator, tf.random.Generator) else None


def draws_from_stateful_ops(random_generator: Any) -> bool:
    """Whether a layer draws from TensorFlow's stateful random ops, which no checkpoint holds. Keras 3: never."""
    return getattr(random_generator, "_rng_type", None) == "legacy_stateful"


# ----- TensorBoard -----


def tensorboard_writers(callback: tf.keras.callbacks.TensorBoard) -> tuple[Any, Any]:
    """The training and validation summary writers of Keras' TensorBoard callback. Keras 3: the same names."""
    return callback._train_writer, callback._val_writer


def log_epoch_metrics(callback: tf.keras.callbacks.TensorBoard, step: int, logs: dict[str, Any]) -> None:
    """Writes ``logs`` as Keras' TensorBoard writes an epoch's (``epoch_<name>``), at ``step``. Keras 3: the same."""
    callback._log_epoch_metrics(step, logs)


# ----- tf.distribute and tf.data -----


def strategy_spans_processes(model: tf.keras.Model) -> bool:
    """Whether the model's ``tf.distribute`` strategy has replicas in other processes (its metrics are global)."""
    return spans_workers(model.distribute_strategy)


def executions_of_several_batches_fail(model: tf.keras.Model) -> bool:
    """Keras 3: whether the model's train and test functions, of several batches per call, fail where it runs.

    They do under a strategy whose replicas span processes: they read the distributed
    iterator's optional inside a while loop, and TensorFlow then asks for a placeholder's
    value ("You must feed a value for placeholder tensor"). Keras 2's do not.
    """
    return KERAS_3 and batches_per_execution(model) > 1 and strategy_spans_processes(model)


def repair_multi_worker_fit() -> None:
    """Keras 3: makes ``fit`` and ``evaluate`` work under a ``MultiWorkerMirroredStrategy`` of several workers.

    Keras 3's TensorFlow trainer fails there twice (keras-team/keras#20585), where
    Keras 2 does not:

    - before the first step it builds the model on the first batch
      (``_maybe_symbolic_build``), of which it keeps only the shapes and dtypes, after
      reducing that batch of per-replica values to one over every replica; a
      ``MultiWorkerMirroredStrategy`` of several workers cannot reduce a structure
      (``(x, y)``) of them and tries to convert it to one tensor. Under such a strategy
      the model is built from this worker's first replica's share of the batch instead:
      the same shapes and dtypes, with no collective;
    - each step averages its logs over the replicas (``reduce_per_replica``, ``"mean"``)
      with ``strategy.reduce("MEAN", value, axis=0)``, which also reduces a log's first
      dimension and so refuses a scalar loss. Under such a strategy the logs are
      averaged over the replicas alone (``axis=None``), as Keras does on one worker.

    Any other strategy goes Keras' own way. Installed once, on Keras 3's TensorFlow
    trainer class and module; Keras 2: nothing to do.
    """
    if not KERAS_3:
        return
    from keras.src.backend.tensorflow import trainer

    keras_build = trainer.TensorFlowTrainer.__dict__["_maybe_symbolic_build"]
    if hasattr(keras_build, "keras_own"):
        return  # installed already
    keras_reduce = trainer.reduce_per_replica

    def build_from_local_batch(self: Any, iterator: Any = None, data_batch: Any = None) -> None:
        strategy: Any = getattr(self, "_distribute_strategy", None)
        if iterator is None or data_batch is not None or not spans_workers(strategy):
            return keras_build(self, iterator=iterator, data_batch=data_batch)
        local = strategy.experimental_local_results
        for _, _, batches in iterator:
            batch = tf.nest.map_structure(
                lambda value: local(value)[0] if isinstance(value, tf.distribute.DistributedValues) else value,
                next(batches),
            )
            return keras_build(self, data_batch=batch)
        return keras_build(self, iterator=iterator)

    def reduce_over_replicas(values: Any, strategy: Any, reduction: str) -> Any:
        tpu = isinstance(strategy, tf.distribute.TPUStrategy)
        if reduction in ("auto", "mean") and not tpu and spans_workers(strategy):
            return tf.nest.map_structure(
                lambda value: None if value is None else strategy.reduce("MEAN", value, axis=None), values
            )
        return keras_reduce(values, strategy, reduction)

    # Keras' own, kept for the test that checks they are still what this repair was written for.
    build_from_local_batch.keras_own = keras_build  # type: ignore[attr-defined]
    reduce_over_replicas.keras_own = keras_reduce  # type: ignore[attr-defined]
    trainer.TensorFlowTrainer._maybe_symbolic_build = build_from_local_batch
    trainer.reduce_per_replica = reduce_over_replicas


def spans_workers(strategy: Any) -> bool:
    """Whether a ``tf.distribute`` strategy has replicas in other processes."""
    in_multi_worker_mode = getattr(getattr(strategy, "extended", None), "_in_multi_worker_mode", None)
    return bool(callable(in_multi_worker_mode) and in_multi_worker_mode())


def iterators_made_per_epoch() -> int:
    """How many iterators of a dataset ``fit`` makes between the start of one epoch and the next.

    Keras 2: one per epoch (and one more before the first). Keras 3: two per epoch, the first
    epoch reading the first one made. A dataset reshuffled each epoch draws an order per
    iterator made, so a resumed epoch must skip as many orders as an uninterrupted fit made.
    """
    return 2 if KERAS_3 else 1


def dataset_of(iterator: Any) -> Optional[tf.data.Dataset]:
    """The dataset a ``tf.data`` iterator reads, or None for another iterator."""
    dataset = getattr(iterator, "_dataset", None)
    return dataset if isinstance(iterator, tf.data.Iterator) and isinstance(dataset, tf.data.Dataset) else None

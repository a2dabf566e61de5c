"""The Keras checkpoint format: what every Keras front end writes, and the one reader of it and of older layouts.

Format 3, written by ``TFKerasTrial``, ``DeterminedCallback`` and ``context.fit`` alike::

    metadata.json             core's entries, the position (``steps_completed``, ``epoch``,
                              ``batch``, ``data_position``, ``slots``, ``continue_id``, ...),
                              ``"checkpoint_kind": "keras"`` and ``"keras_checkpoint"``: the
                              format, what wrote it, the Keras version and the files it holds
    model_checkpoint.*        a TensorFlow checkpoint whose root is the model (its optimizer with
                              it), with the random generators attached: what ``model.save_weights``
                              writes (plus the generators), so ``model.load_weights`` reads it, as
                              the reference system's callback checkpoints are read; a
                              ``DeterminedCallback`` whose ``save_model`` is overridden writes
                              there what its override writes
    model/architecture.json   model.to_json(), when the model has one (not a subclassed model)
    saved_model/              a serving_default SavedModel (a TFKerasTrial's)
    callbacks.json/.npz       the states of det.keras.callbacks.Callback instances (a TFKerasTrial's)
    data/rank<N>.*            each process's tf.data iterator, when it can be saved (a TFKerasTrial's)
    random_states.json        per process: Python's and NumPy's random states and the TF generators'
    <your files>              what callbacks wrote in on_checkpoint_end

Readers look at ``keras_checkpoint.contents``, never at files. Format 2 differs only in its
variables: ``model/state.*``, a ``tf.train.Checkpoint(model, optimizer, global_generator,
layer_generators)`` whose root is no model (``format`` in the metadata tells them apart).
Checkpoints written before format 2 have no kind in their metadata; their files tell their
layout, read here only:

- TFKerasTrial v1: ``model/state.*`` (the model, the global and the layers' generators),
  the position and every process's random states in ``metadata.json``;
- DeterminedCallback v1: ``model_checkpoint.*`` (the model, the optimizer and the layers'
  generators) and ``callback_state.json`` (the position, ``continue_id``, random states);
  ``context.fit`` v1 adds ``model_architecture.json``.
"""

import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

from det_estimator import core
from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind
from det_estimator._version import __version__
from det_estimator.checkpoint import read_checkpoint
from det_estimator.errors import DetEstimatorError
from det_estimator.keras._engine import _callback_states, _keras_compat, _random_states
from det_estimator.keras._engine._position import ITERATORS_DIR
from det_estimator.keras._engine._serving import ServingExport

logger = logging.getLogger("det_estimator.keras")

KIND = "keras"
FORMAT = 3
# The layouts a checkpoint can have.
FORMAT_3 = "format 3"
FORMAT_2 = "format 2"
TRIAL_V1 = "TFKerasTrial v1"
CALLBACK_V1 = "DeterminedCallback v1"
# The files of format 3 (format 2's but the variables).
VARIABLES = "model_checkpoint"
FORMAT_2_VARIABLES = "model/state"
ARCHITECTURE = "model/architecture.json"
SAVED_MODEL = "saved_model"
CALLBACKS = _callback_states.STATES_FILE
ITERATORS = ITERATORS_DIR
RANDOM_STATES = "random_states.json"
# The files of the older layouts.
CALLBACK_V1_WEIGHTS = "model_checkpoint"
CALLBACK_V1_STATE = "callback_state.json"
CALLBACK_V1_ARCHITECTURE = "model_architecture.json"


class CheckpointMismatchError(DetEstimatorError, ValueError):
    """A checkpoint's variables do not match the model the trial built."""


class CheckpointLoadError(DetEstimatorError, ValueError):
    """A checkpoint cannot be loaded as a Keras model."""


# ----- writing -----


@dataclass(frozen=True)
class CheckpointOptions:
    """What a front end's checkpoints hold beside the variables and the position.

    Attributes:
        written_by: ``"TFKerasTrial"``, ``"DeterminedCallback"`` or ``"context.fit"``.
        saved_model: a SavedModel for serving.
        callbacks: the states of ``det.keras.callbacks.Callback`` instances.
        iterators: each process's tf.data iterator.
        save_variables: writes the variables at a prefix instead of the writer, called
            on every process as ``save_variables(model, prefix, distributed)`` (the chief's
            prefix is the checkpoint's, the others' one thrown away): a
            ``DeterminedCallback``'s ``save_model`` override.
    """

    written_by: str
    saved_model: bool = False
    callbacks: bool = False
    iterators: bool = False
    save_variables: Optional[Callable[[tf.keras.Model, str, core.DistributedContext], None]] = None


class CheckpointWriter:
    """Writes a model's checkpoints in format 3 through a core context; every process calls :meth:`write` together.

    Args:
        core_context: the run's core context.
        model: the model being trained.
        options: what the checkpoints hold besides the variables.
    """

    def __init__(self, core_context: core.Context, model: tf.keras.Model, options: CheckpointOptions) -> None:
        self._core = core_context
        self._model = model
        self._options = options
        self._export = ServingExport(model) if options.saved_model else None
        self._root: Optional[tf.train.Checkpoint] = None
        self._architecture: Optional[str] = None
        self._described = False
        self.last_storage_id: Optional[str] = None

    def write(
        self,
        position: dict[str, Any],
        own_random_states: dict[str, Any],
        *,
        metadata: Optional[dict[str, Any]] = None,
        every_process: Optional[Callable[[Path], None]] = None,
        chief: Optional[Callable[[Path], None]] = None,
    ) -> str:
        """Writes a checkpoint at ``position`` (a collective); returns its storage id.

        Args:
            position: where training stands, ``steps_completed`` first; the same on every process.
            own_random_states: this process's entry of ``random_states.json``.
            metadata: more entries of ``metadata.json``; the same on every process.
            every_process: writes this process's own files (its iterator) into the checkpoint.
            chief: writes the chief's other files (callbacks' states and files), last.
        """
        distributed = self._core.distributed
        random_states = distributed.allgather(own_random_states)
        contents = self._contents()
        described = {
            "format": FORMAT,
            "written_by": self._options.written_by,
            "keras": _keras_version(),
            "contents": contents,
        }
        full = {
            "steps_completed": position["steps_completed"],
            "checkpoint_kind": KIND,
            "keras_checkpoint": described,
            **position,
            **(metadata or {}),
            "framework": {"det_estimator": __version__, "tensorflow": tf.__version__},
        }
        with self._core.checkpoint.store_path(full, shard=True) as (path, storage_id):
            path = Path(path)
            if every_process is not None:
                every_process(path)
            if distributed.rank == 0:
                self._save_variables(str(path / VARIABLES))
                self._write_chief_files(path, contents, random_states)
                if chief is not None:
                    chief(path)
            else:
                with tempfile.TemporaryDirectory(prefix="det-estimator-ckpt-") as scratch:
                    self._save_variables(str(Path(scratch) / VARIABLES))
        self.last_storage_id = storage_id
        return storage_id

    def _save_variables(self, prefix: str) -> None:
        save = self._options.save_variables
        if save is None:
            self.save_variables(prefix)
        else:
            save(self._model, prefix, self._core.distributed)

    def save_variables(self, prefix: str) -> None:
        """Writes the variables at ``prefix`` as format 3 holds them: the model as root, as ``model.save_weights`` does.

        Every process calls it, as the writer does; only the chief's prefix is kept.
        Reading a ``tf.distribute`` strategy's variables can be a collective, so under a
        strategy that spans processes every process writes them; otherwise only the chief.
        """
        if self._core.distributed.rank == 0 or _keras_compat.strategy_spans_processes(self._model):
            self._variables_root().write(prefix)

    def _contents(self) -> dict[str, Optional[str]]:
        """The files of the checkpoint about to be written: the same on every process."""
        if not self._described:
            self._described = True
            self._architecture = architecture_of(self._model)
        options = self._options
        return {
            "variables": VARIABLES,
            "architecture": ARCHITECTURE if self._architecture is not None else None,
            "saved_model": SAVED_MODEL if self._export is not None and self._export.ready() else None,
            "callbacks": CALLBACKS if options.callbacks else None,
            "iterators": ITERATORS if options.iterators else None,
            "random_states": RANDOM_STATES,
        }

    def _write_chief_files(self, path: Path, contents: dict[str, Optional[str]], random_states: list[Any]) -> None:
        if contents["architecture"] is not None and self._architecture is not None:
            (path / ARCHITECTURE).parent.mkdir(parents=True, exist_ok=True)
            (path / ARCHITECTURE).write_text(self._architecture, encoding="utf-8")
        if contents["saved_model"] is not None and self._export is not None:
            self._export.write(path / SAVED_MODEL)
        (path / RANDOM_STATES).write_text(json.dumps({"ranks": random_states}), encoding="utf-8")

    def _variables_root(self) -> tf.train.Checkpoint:
        if self._root is None:  # built once: each new one would trace its save functions again
            self._root = _model_root(self._model)
        return self._root


def _model_root(model: tf.keras.Model) -> tf.train.Checkpoint:
    """Format 3's variables: the model as the root (as ``model.save_weights`` has it), the rest attached to it.

    The optimizer is the model's own child in Keras 2 (attached here too, under the same
    name, where a Keras does not track it); the random generators are attached, so
    ``model.load_weights`` reads the model and leaves them.
    """
    attached: dict[str, Any] = dict(_random_states.generators(model))
    if getattr(model, "optimizer", None) is not None:
        attached["optimizer"] = model.optimizer
    return tf.train.Checkpoint(root=model, **attached)


def _format_2_root(model: tf.keras.Model) -> tf.train.Checkpoint:
    """What format 2's ``model/state`` holds: the model (its optimizer with it), the optimizer, the generators."""
    found = {"model": model}
    if getattr(model, "optimizer", None) is not None:
        found["optimizer"] = model.optimizer
    return tf.train.Checkpoint(**found, **_random_states.generators(model))


def architecture_of(model: tf.keras.Model) -> Optional[str]:
    """The model's architecture as Keras' JSON, or None for a model Keras cannot describe (subclassed)."""
    try:
        return _keras_compat.architecture_json(model)
    except (NotImplementedError, TypeError, ValueError) as error:
        logger.info("the checkpoints hold no architecture of this model (%s); load them into a model you build", error)
        return None


def _keras_version() -> str:
    return _keras_compat.keras_version()


# ----- reading -----


@dataclass(frozen=True)
class SavedState:
    """What a Keras checkpoint holds, whatever its layout.

    Attributes:
        path: the checkpoint's directory.
        layout: :data:`FORMAT_3`, :data:`FORMAT_2`, :data:`TRIAL_V1` or :data:`CALLBACK_V1`.
        written_by: the front end that wrote it.
        metadata: its ``metadata.json``.
        position: where training stood (format 3's keys; absent ones None).
        random_states: per process, ``{"python", "numpy", "generators"}`` (any may be missing).
        generators_include_global: whether each process's ``generators`` starts with the global generator's.
        variables: the prefix of its TensorFlow checkpoint.
        architecture: the model's architecture file, if it holds one.
        saved_model: its SavedModel's directory, if it holds one.
        iterators: the directory of the processes' iterator states, if it holds one.
    """

    path: Path
    layout: str
    written_by: str
    metadata: dict[str, Any]
    position: dict[str, Any]
    random_states: list[dict[str, Any]] = field(default_factory=list)
    generators_include_global: bool = True
    variables: str = ""
    architecture: Optional[Path] = None
    saved_model: Optional[Path] = None
    iterators: Optional[Path] = None

    def callback_states(self) -> Optional[list[dict[str, Any]]]:
        """The saved states of ``det.keras.callbacks.Callback`` instances, or None."""
        return _callback_states.read_states(self.path)

    def own_random_states(self, rank: int) -> dict[str, Any]:
        """The random states process ``rank`` saved (empty when it saved none)."""
        return self.random_states[rank] if rank < len(self.random_states) else {}


POSITION = (
    "steps_completed",
    "epoch",
    "batch",
    "data_position",
    "slots",
    "continue_id",
    "steps_per_epoch",
    "epochs",
    "batches_trained",
    "best_validation_metric",
    "last_validation_batches",
)


def read(path: Path) -> SavedState:
    """The state a Keras checkpoint holds, in any of its layouts.

    Raises:
        core.CheckpointError: the directory holds none of the layouts.
    """
    path = Path(path)
    metadata = _metadata(path)
    kind = checkpoint_kind(path)
    if kind is CheckpointKind.KERAS:
        described = metadata["keras_checkpoint"]
        contents = described.get("contents") or {}
        states = json.loads((path / RANDOM_STATES).read_text(encoding="utf-8")) if contents.get("random_states") else {}
        return SavedState(
            path,
            FORMAT_2 if described.get("format") == 2 else FORMAT_3,
            described.get("written_by", ""),
            metadata,
            {key: metadata.get(key) for key in POSITION},
            random_states=states.get("ranks", []),
            variables=str(path / contents["variables"]),
            architecture=_entry(path, contents.get("architecture")),
            saved_model=_entry(path, contents.get("saved_model")),
            iterators=_entry(path, contents.get("iterators")),
        )
    if kind is CheckpointKind.KERAS_TRIAL:
        position = {key: metadata.get(key) for key in POSITION}
        position["steps_completed"] = position["batches_trained"]
        states = [
            {"python": own.get("python"), "numpy": own.get("numpy"), "generators": own.get("tensorflow")}
            for own in metadata.get("rng_states", [])
        ]
        return SavedState(
            path,
            TRIAL_V1,
            "TFKerasTrial",
            metadata,
            position,
            random_states=states,
            variables=str(path / FORMAT_2_VARIABLES),
            saved_model=_entry(path, SAVED_MODEL),
            iterators=_entry(path, ITERATORS),
        )
    if kind is CheckpointKind.KERAS_CALLBACK:
        written = path / CALLBACK_V1_STATE
        state = json.loads(written.read_text(encoding="utf-8")) if written.is_file() else {}
        python_numpy = state.get("random_states") or []
        generators = state.get("generator_states") or []
        states = []
        for rank in range(max(len(python_numpy), len(generators))):
            own = dict(python_numpy[rank] or {}) if rank < len(python_numpy) else {}
            if rank < len(generators):
                own["generators"] = generators[rank]
            states.append(own)
        architecture = _entry(path, CALLBACK_V1_ARCHITECTURE)
        return SavedState(
            path,
            CALLBACK_V1,
            "context.fit" if architecture is not None else "DeterminedCallback",
            metadata,
            {key: state.get(key) for key in POSITION},
            random_states=states,
            generators_include_global=False,
            variables=str(path / CALLBACK_V1_WEIGHTS),
            architecture=architecture,
        )
    raise core.CheckpointError(
        f"Checkpoint {path.name} was not written by a Keras front end (TFKerasTrial, DeterminedCallback or "
        f"context.fit): its metadata.json has no checkpoint_kind 'keras', and it holds neither "
        f"{FORMAT_2_VARIABLES}.index nor {CALLBACK_V1_STATE}."
    )


def _metadata(path: Path) -> dict[str, Any]:
    """The checkpoint's ``metadata.json``, or nothing for a directory of files written by hand."""
    try:
        return dict(read_checkpoint(path).metadata)
    except ValueError:
        return {}


def _entry(path: Path, name: Optional[str]) -> Optional[Path]:
    return None if name is None or not (path / name).exists() else path / name


def restore_variables(
    state: SavedState, model: tf.keras.Model, *, with_optimizer: bool, strict: bool = False
) -> tuple[tf.train.Checkpoint, Any]:
    """Reads a checkpoint's variables into ``model``; variables not created yet get their value when they are.

    Args:
        state: the checkpoint.
        model: the model to restore.
        with_optimizer: the optimizer's state and the random generators too (a
            continued training); else the weights alone, through a view of the model
            without its optimizer (a warm start keeps the fresh optimizer).
        strict: raise when a variable that exists has no value in the checkpoint.

    Returns:
        The reading root and its status: keep them until every variable exists.

    Raises:
        CheckpointMismatchError: ``strict`` and the checkpoint holds another model's variables.
    """
    if state.layout == FORMAT_3:
        root = _model_root(model) if with_optimizer else _keras_compat.model_without_optimizer(model)
    elif not with_optimizer:
        root = tf.train.Checkpoint(model=_keras_compat.model_without_optimizer(model))
    elif state.layout == TRIAL_V1:
        root = tf.train.Checkpoint(model=model, **_random_states.generators(model))
    elif state.layout == CALLBACK_V1:
        layers = _random_states.generators(model)["layer_generators"]
        parts = {"layer_generators": layers} if layers else {}
        root = tf.train.Checkpoint(model=model, optimizer=model.optimizer, **parts)
    else:
        root = _format_2_root(model)
    status = root.read(state.variables)
    if strict:
        try:
            status.assert_existing_objects_matched()
        except AssertionError as error:
            raise CheckpointMismatchError(
                f"The checkpoint {state.path} holds the variables of another model than build_model() builds now: "
                f"{error}"
            ) from None
    status.expect_partial()
    return root, status


def read_variables(model: tf.keras.Model, prefix: str) -> None:
    """Reads what format 3's variables hold at ``prefix`` into ``model``: its weights, its optimizer, the generators."""
    _model_root(model).read(prefix).expect_partial()


def restore_random_states(state: SavedState, model: tf.keras.Model, rank: int, python_and_numpy: bool = True) -> None:
    """Puts back process ``rank``'s random states: Python's and NumPy's (unless told not to) and the generators'."""
    own = state.own_random_states(rank)
    if python_and_numpy and own.get("python") is not None:
        _random_states.restore_python_and_numpy(own)
    generators = _random_states.generators(model)
    found = [generators["global_generator"], *generators["layer_generators"]]
    if not state.generators_include_global:
        found = found[1:]
    _random_states.restore_generator_states(found, own.get("generators"))

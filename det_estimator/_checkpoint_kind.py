"""Which kind of trial wrote a checkpoint directory: written in its metadata, or read from older ones' files.

The loaders of each kind use it to refuse, with the loader to use instead, a
checkpoint that another kind wrote, whose SavedModel (if any) they would otherwise
load as if it were theirs. Every Keras front end (``TFKerasTrial``,
``DeterminedCallback``, ``context.fit``) writes one format whose ``metadata.json``
says ``"checkpoint_kind": "keras"`` and, under ``keras_checkpoint``, what wrote it and
which files it holds. Older checkpoints name no kind; their files tell it:

- an ``EstimatorTrial`` (or ``det.init()``) checkpoint holds its TensorFlow checkpoint
  under ``model/`` with TensorFlow's ``model/checkpoint`` state file, and one SavedModel
  per serving function (det-estimator 0.1: under ``saved_models/``);
- a ``TFKerasTrial`` checkpoint written before the one Keras format holds
  ``model/state.*`` and one SavedModel, ``saved_model/``;
- a checkpoint of ``DeterminedCallback`` (and so of ``context.fit``) written before it
  holds the weights as ``model_checkpoint.*`` and no SavedModel.

No TensorFlow is imported here: the command uses it.
"""

import enum
import json
from pathlib import Path
from typing import Any, Optional, Union

from det_estimator._saved_models import MODEL_DIR, saved_models_of

# The prefix of a TFKerasTrial's tf.train.Checkpoint, under model/.
KERAS_TRIAL_STATE = "state"
# The prefix of DeterminedCallback's tf.train.Checkpoint of the weights.
CALLBACK_WEIGHTS = "model_checkpoint"
# A TFKerasTrial's SavedModel.
KERAS_TRIAL_SAVED_MODEL = "saved_model"
# What metadata.json names as the kind of a checkpoint of the one Keras format.
KERAS_KIND = "keras"
# How messages name each Keras front end that writes it.
_KERAS_WRITERS = {
    "TFKerasTrial": "a TFKerasTrial",
    "DeterminedCallback": "det.keras.DeterminedCallback",
    "context.fit": "context.fit of det.keras.init()",
}


class CheckpointKind(enum.Enum):
    """What wrote a checkpoint, and how to load it for inference."""

    ESTIMATOR = "an EstimatorTrial"
    KERAS = "a Keras front end"
    KERAS_TRIAL = "a TFKerasTrial"
    KERAS_CALLBACK = "det.keras.DeterminedCallback (or context.fit)"

    @property
    def trial_type(self) -> str:
        """What wrote the checkpoint, as ``checkpoint describe`` names it: a trial class, or the callback."""
        return {
            CheckpointKind.ESTIMATOR: "EstimatorTrial",
            CheckpointKind.KERAS: "Keras",
            CheckpointKind.KERAS_TRIAL: "TFKerasTrial",
            CheckpointKind.KERAS_CALLBACK: "DeterminedCallback",
        }[self]

    def written_by(self, path: Union[str, Path]) -> str:
        """What wrote the checkpoint at ``path``: :attr:`trial_type`, or the Keras front end its metadata names."""
        if self is CheckpointKind.KERAS:
            return str(keras_checkpoint(path).get("written_by") or self.trial_type)
        return self.trial_type

    def description(self, path: Union[str, Path]) -> str:
        """What wrote the checkpoint at ``path``, as messages name it: "a TFKerasTrial", ..."""
        if self is CheckpointKind.KERAS:
            written_by = self.written_by(path)
            return f"{_KERAS_WRITERS.get(written_by, written_by)} (the Keras checkpoint format)"
        return self.value

    def loaders(self, path: Union[str, Path], uuid: Optional[str] = None) -> list[str]:
        """Every call that loads the checkpoint at ``path`` of this kind, as messages name them."""
        if self is not CheckpointKind.KERAS:
            return [self.loader(path, uuid)]
        described = keras_checkpoint(path)
        contents = described.get("contents") or {}
        named = "..." if uuid is None else repr(uuid)
        built = "" if contents.get("architecture") else ", model=<a model built as in training>"
        found = [
            f"det.keras.load_model_from_checkpoint_path({str(path)!r}{built})",
            f"context.load_checkpoint_model(checkpoint_uuid={named}{built}) of det.keras.init()",
        ]
        variables = contents.get("variables")
        if described.get("format", 0) >= 3 and variables:
            # Its variables' root is the model, as the reference system's callback checkpoints have it.
            found.append(f"model.load_weights({str(Path(path) / variables)!r}) of a model built as in training")
        return found

    def loader(self, path: Union[str, Path], uuid: Optional[str] = None, serving_name: Optional[str] = None) -> str:
        """What loads the checkpoint at ``path`` of this kind, as a message names it.

        Args:
            path: the checkpoint's directory.
            uuid: its uuid, when known (the callback's checkpoints load by uuid from the store).
            serving_name: the SavedModel an estimator checkpoint's call loads, when known.
        """
        if self is CheckpointKind.ESTIMATOR:
            serving = "..." if serving_name is None else repr(serving_name)
            return f"det.estimator.load_estimator_from_checkpoint_path({str(path)!r}, serving_name={serving})"
        if self is CheckpointKind.KERAS_TRIAL:
            return f"det.keras.load_model_from_checkpoint_path({str(path)!r}, model=<a model built as in training>)"
        if self is CheckpointKind.KERAS:
            return " or ".join(self.loaders(path, uuid))
        return (
            f"context.load_checkpoint_model(checkpoint_uuid={'...' if uuid is None else repr(uuid)}) of "
            f"det.keras.init(), or tf.train.Checkpoint(model=model).read({str(Path(path) / CALLBACK_WEIGHTS)!r}) "
            "into a model built as in training (it holds the weights, not a SavedModel)"
        )

    def saved_models(self, path: Union[str, Path]) -> dict[str, Path]:
        """The SavedModels of the checkpoint at ``path``, by serving name (a TFKerasTrial's one by its directory)."""
        if self is CheckpointKind.ESTIMATOR:
            return saved_models_of(path)
        if self is CheckpointKind.KERAS:
            saved_model = (keras_checkpoint(path).get("contents") or {}).get("saved_model")
            return {saved_model: Path(path) / saved_model} if saved_model else {}
        if self is CheckpointKind.KERAS_TRIAL and (Path(path) / KERAS_TRIAL_SAVED_MODEL / "saved_model.pb").is_file():
            return {KERAS_TRIAL_SAVED_MODEL: Path(path) / KERAS_TRIAL_SAVED_MODEL}
        return {}


def load_calls(path: Union[str, Path], uuid: str, kind: Optional[CheckpointKind]) -> list[str]:
    """The Python calls that load the checkpoint at ``path``: one, or one per SavedModel of an estimator's.

    What ``checkpoint describe`` and the web page's trial page both show.

    Args:
        path: the checkpoint's directory.
        uuid: its uuid.
        kind: what wrote it (:func:`checkpoint_kind`); None for a Core API script's own files.
    """
    if kind is None:
        return [f"core.checkpoint.restore_path({uuid!r}) of det.core.init() (its files are the script's own)"]
    if kind is CheckpointKind.ESTIMATOR:
        return [kind.loader(path, serving_name=name) for name in kind.saved_models(path)]
    return kind.loaders(path, uuid=uuid)


def _metadata(path: Union[str, Path]) -> dict[str, Any]:
    """The checkpoint's ``metadata.json``; empty when it has none or it cannot be read."""
    try:
        metadata = json.loads((Path(path) / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return metadata if isinstance(metadata, dict) else {}


def keras_checkpoint(path: Union[str, Path]) -> dict[str, Any]:
    """The ``keras_checkpoint`` entry of a Keras checkpoint's metadata: format, ``written_by``, ``contents``."""
    entry = _metadata(path).get("keras_checkpoint")
    return entry if isinstance(entry, dict) else {}


def checkpoint_kind(path: Union[str, Path]) -> Optional[CheckpointKind]:
    """The kind of trial that wrote the checkpoint at ``path``, or None when neither its metadata nor files name one.

    The metadata's ``checkpoint_kind`` says it; only a checkpoint that does not (one
    written before it did, or a script's own) is known by its files.
    """
    checkpoint = Path(path)
    if _metadata(checkpoint).get("checkpoint_kind") == KERAS_KIND:
        return CheckpointKind.KERAS
    return _legacy_kind(checkpoint)


def _legacy_kind(checkpoint: Path) -> Optional[CheckpointKind]:
    """The kind of a checkpoint whose metadata names none, by its files (those written before kinds were named)."""
    if (checkpoint / MODEL_DIR / "checkpoint").is_file() or (checkpoint / "saved_models").is_dir():
        return CheckpointKind.ESTIMATOR
    if (checkpoint / MODEL_DIR / f"{KERAS_TRIAL_STATE}.index").is_file():
        return CheckpointKind.KERAS_TRIAL
    if (checkpoint / f"{CALLBACK_WEIGHTS}.index").is_file():
        return CheckpointKind.KERAS_CALLBACK
    return None


def refuse_other_kind(path: Union[str, Path], expected: CheckpointKind, *also: CheckpointKind) -> None:
    """Raises when ``path`` is not a directory, or a checkpoint of another kind than ``expected`` (or ``also``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        NotADirectoryError: ``path`` is a file.
        ValueError: ``path`` is a checkpoint of another kind; the message names its loader.
    """
    checkpoint = Path(path)
    if not checkpoint.exists():
        raise FileNotFoundError(f"There is no checkpoint at {path}: no such file or directory.")
    if not checkpoint.is_dir():
        raise NotADirectoryError(f"{path} is a file, not a checkpoint's directory.")
    kind = checkpoint_kind(checkpoint)
    if kind is not None and kind is not expected and kind not in also:
        saved_models = ", ".join(saved_models_of(checkpoint)) if kind is CheckpointKind.ESTIMATOR else ""
        held = f" (its SavedModels: {saved_models})" if saved_models else ""
        raise ValueError(
            f"{path} is a checkpoint of {kind.description(checkpoint)}{held}, not of {expected.value}: load it with "
            f"{kind.loader(path)}."
        )

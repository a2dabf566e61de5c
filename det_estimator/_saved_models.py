"""Where an estimator checkpoint keeps its SavedModels; read without TensorFlow (the command lists them).

A checkpoint holds one SavedModel per serving function, each in a directory named
after it: ``<checkpoint>/<serving name>/saved_model.pb``, as the reference system lays
them out. Checkpoints written by det-estimator 0.1 kept them under
``<checkpoint>/saved_models/<serving name>``; both are read.
"""

from pathlib import Path
from typing import Union

from det_estimator.checkpoint._metadata import METADATA_FILE

# The TensorFlow checkpoint files' directory in a checkpoint.
MODEL_DIR = "model"
# Each process's training input position: input/rank-<r>/.
INPUT_DIR = "input"
# Names a serving function cannot take: other parts of the checkpoint live there.
RESERVED_NAMES = (MODEL_DIR, INPUT_DIR, "code", "saved_models", METADATA_FILE)
_OLD_EXPORTS_DIR = "saved_models"


def saved_models_of(path: Union[str, Path]) -> dict[str, Path]:
    """The SavedModels of a checkpoint directory, by serving name, sorted by name."""
    checkpoint = Path(path)
    found: dict[str, Path] = {}
    old = checkpoint / _OLD_EXPORTS_DIR
    if old.is_dir():
        found.update({export.name: export for export in old.iterdir() if export.is_dir()})
    if checkpoint.is_dir():
        for entry in checkpoint.iterdir():
            if entry.is_dir() and entry.name not in RESERVED_NAMES and (entry / "saved_model.pb").is_file():
                found[entry.name] = entry
    return dict(sorted(found.items()))

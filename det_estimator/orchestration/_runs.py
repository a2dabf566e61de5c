"""Where an experiment's checkpoints go.

How a run begins, records its error and ends is the run lifecycle's
(:mod:`det_estimator.lifecycle`).
"""

from pathlib import Path

from det_estimator.config import ExperimentConfig


def checkpoint_storage_root(config: ExperimentConfig, context_dir: str) -> Path:
    """The config's checkpoint storage directory; a relative one is relative to the context directory."""
    root = Path(config.checkpoint_storage.checkpoint_directory)
    return root if root.is_absolute() else Path(context_dir) / root

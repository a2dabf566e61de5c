"""Valid configs that probably do not do what their author meant: said once, when the experiment is created."""

from typing import Any

from det_estimator.config import ExperimentConfig
from det_estimator.config._hyperparameters import ConstHyperparameter


def config_warnings(config: ExperimentConfig) -> list[str]:
    """What to tell the user about ``config`` (with the slots it runs on) before it runs; empty when nothing is odd."""
    warnings = []
    slots = config.resources.slots_per_trial
    global_batch_size = _constant(config.hyperparameters.get("global_batch_size"))
    if isinstance(global_batch_size, int) and slots > 1 and global_batch_size % slots:
        per_slot = global_batch_size // slots
        warnings.append(
            f"hyperparameters.global_batch_size {global_batch_size} is not divisible by the {slots} slots: each "
            f"process batches {per_slot} records, so every step trains on {per_slot * slots} records, not "
            f"{global_batch_size}. Use a multiple of {slots} to train on exactly the global batch size."
        )
    if (
        isinstance(global_batch_size, int)
        and config.min_validation_period is not None
        and not config.searcher.length_from_script
    ):
        try:
            period = config.min_validation_period.to_batches(global_batch_size, config.records_per_epoch)
            length = config.searcher.max_length.to_batches(global_batch_size, config.records_per_epoch)
        except (ValueError, ZeroDivisionError):
            return warnings
        if period > length:
            warnings.append(
                f"min_validation_period ({period} batches) is longer than searcher.max_length ({length} batches): "
                "the trial validates only once, at its end."
            )
    return warnings


def _constant(spec: Any) -> Any:
    """A hyperparameter's value when it is a constant, else None."""
    if isinstance(spec, ConstHyperparameter):
        return spec.val
    return spec if isinstance(spec, (int, float, str, bool)) else None

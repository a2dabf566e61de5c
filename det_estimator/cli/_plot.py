"""``experiment plot``: learning curves of an experiment, drawn to an image file."""

import math
import numbers
from pathlib import Path
from typing import Optional

from det_estimator.store import ExperimentStore, MetricKind, MetricRecord

# Reported with every validation but not a learning curve.
_NOT_CURVES = {"global_step"}


def plot_learning_curves(store: ExperimentStore, experiment_id: int, output: Path) -> list[str]:
    """Draws training loss and each validation metric against batches; returns the panels' titles.

    An experiment without metrics yet gets an image that says so, and no panels.

    Every trial has its curve; with several trials, the best one (by the searcher
    metric) is drawn thick and named in the legend, the others thin. The image format
    follows the file's suffix (``.png``, ``.svg``, ``.pdf``).
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    from matplotlib import pyplot

    experiment = store.experiment(experiment_id)
    best = store.best_validation(experiment_id)
    trials = store.trials(experiment_id)
    panels: dict[str, list[tuple[str, list[int], list[float]]]] = {}
    for trial in trials:
        label = f"trial {trial.id}" + (
            " (best)" if best is not None and best.trial_id == trial.id and len(trials) > 1 else ""
        )
        training = store.metrics(trial.id, MetricKind.TRAINING)
        validations = store.metrics(trial.id, MetricKind.VALIDATION)
        # A curve without points would still take a legend entry (and, alone, an empty panel).
        batches, values = _series(training, "loss")
        if values:
            panels.setdefault("loss", []).append((f"{label} training", batches, values))
        for name in sorted({name for v in validations for name in v.metrics} - _NOT_CURVES):
            batches, values = _series(validations, name)
            if values:
                panels.setdefault(name, []).append((f"{label} validation", batches, values))
    columns = max(1, min(3, len(panels)))
    rows = max(1, math.ceil(len(panels) / columns))
    figure, axes = pyplot.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    if not panels:  # its one empty axis is hidden below, with the unused ones
        figure.text(0.5, 0.5, "no metrics reported yet", ha="center", va="center")
    for axis, (title, curves) in zip(axes.flat, panels.items()):
        others_labelled = False
        for curve_label, batches, values in curves:
            thin = len(trials) > 1 and "(best)" not in curve_label
            marker = "o" if "validation" in curve_label else None
            legend: Optional[str] = curve_label
            if thin:  # one legend entry for all the other trials
                legend, others_labelled = (None if others_labelled else "other trials"), True
            axis.plot(
                batches,
                values,
                marker=marker,
                markersize=2 if thin else 3,
                linewidth=0.8 if thin else 2.0,
                alpha=0.45 if thin else 1.0,
                label=legend,
            )
        axis.set_title(title)
        axis.set_xlabel("batches")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.suptitle(f"Experiment {experiment_id}: {experiment.name} ({experiment.state})")
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    pyplot.close(figure)
    return list(panels)


def _series(records: list[MetricRecord], name: str) -> tuple[list[int], list[float]]:
    points = [
        (record.batches, float(record.metrics[name]))
        for record in records
        if isinstance(record.metrics.get(name), numbers.Real) and not isinstance(record.metrics[name], bool)
    ]
    return [batches for batches, _ in points], [value for _, value in points]

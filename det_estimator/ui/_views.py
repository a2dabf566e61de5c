"""What each page shows, read from the store's own read API into typed records; no HTML, no web server.

The pages (``_pages.py``) render these records, and the charts are Plotly figures
built here as plain data, so that all of it is tested without a browser. Everything a
user wrote stays as it was written: escaping is the templates' job, once, at output.
"""

import html
import math
import time
from dataclasses import dataclass
from typing import Any, Optional, Union

import yaml

from det_estimator._checkpoint_kind import checkpoint_kind, load_calls
from det_estimator.config import load_experiment_config
from det_estimator.orchestration import saved_method_state
from det_estimator.searcher import asha_rungs
from det_estimator.store import (
    CheckpointRecord,
    ExperimentRecord,
    ExperimentStore,
    MetricKind,
    MetricRecord,
    RestartRecord,
    State,
    TrialRecord,
    TrialRunRecord,
)

# A value of a table cell or of a chart's axis: what a hyperparameter or a metric may be.
Value = Union[int, float, str, bool, None]


@dataclass(frozen=True)
class ExperimentRow:
    """One row of the experiments page.

    Attributes:
        progress: batches done of the length for one trial; the batches of all trials for a search.
        best: the best value of the searcher metric so far, if any.
        duration_seconds: from its creation to its end, or to now while it runs.
    """

    id: int
    name: str
    state: str
    progress: str
    metric: str
    best: Optional[float]
    num_trials: int
    created_at: float
    duration_seconds: float


def experiment_rows(store: ExperimentStore, state: str = "", name: str = "") -> list[ExperimentRow]:
    """The experiments page's rows, newest first, those of ``state`` whose name holds ``name`` (either may be "")."""
    rows = []
    shown = [
        experiment
        for experiment in reversed(store.experiments())
        if (not state or experiment.state.value == state)
        and (not name or name.casefold() in experiment.name.casefold())
    ]
    best_of = store.best_validations(shown)
    for experiment in shown:
        best = best_of[experiment.id]
        rows.append(
            ExperimentRow(
                id=experiment.id,
                name=experiment.name,
                state=experiment.state.value,
                progress=_progress(experiment),
                metric=experiment.searcher_metric,
                best=None if best is None else best.value,
                num_trials=experiment.num_trials,
                created_at=experiment.created_at,
                duration_seconds=(experiment.ended_at or time.time()) - experiment.created_at,
            )
        )
    return rows


def _progress(experiment: ExperimentRecord) -> str:
    if experiment.is_search or not experiment.max_batches:
        return f"{experiment.batches_trained:,} batches"
    return f"{experiment.batches_trained:,} / {experiment.max_batches:,} batches"


STATES = tuple(state.value for state in State)


@dataclass(frozen=True)
class TrialRow:
    """One row of an experiment's trial table.

    Attributes:
        hparams: its hyperparameters, nested ones flattened to dotted names.
        metrics: its latest validation's metrics.
        searcher_value: its best value of the searcher metric over its validations.
    """

    id: int
    state: str
    batches: int
    restarts: int
    hparams: dict[str, Value]
    metrics: dict[str, Value]
    searcher_value: Optional[float]

    def cell(self, column: str) -> Value:
        """The value of a column of the table: ``id``, ``state``, ``batches``, ``hp:NAME`` or ``metric:NAME``."""
        kind, _, name = column.partition(":")
        if kind == "hp":
            return self.hparams.get(name)
        if kind == "metric":
            return self.metrics.get(name)
        if column == "best":
            return self.searcher_value
        columns: dict[str, Value] = {
            "id": self.id,
            "state": self.state,
            "batches": self.batches,
            "restarts": self.restarts,
        }
        return columns.get(column)


def sort_trials(rows: list[TrialRow], column: str, descending: bool = False) -> list[TrialRow]:
    """The rows ordered by a column; rows with no value (or NaN) there come last either way.

    Numbers sort as numbers and before text, so that a column mixing them (a categorical
    hyperparameter of numbers and strings) still sorts.
    """
    present = [row for row in rows if _sortable(row.cell(column))]
    missing = [row for row in rows if not _sortable(row.cell(column))]
    present.sort(key=lambda row: (_sort_key(row.cell(column)), row.id), reverse=descending)
    return present + missing


def _sortable(value: Value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _sort_key(value: Value) -> tuple[int, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


@dataclass(frozen=True)
class RungRow:
    """One rung of an adaptive ASHA search: its length (in ``unit``) and the trials that reached it, best first."""

    bracket: int
    index: int
    length: int
    unit: str
    trial_ids: tuple[int, ...]


@dataclass(frozen=True)
class ExperimentPage:
    """Everything the experiment page shows but the charts (:func:`experiment_charts`)."""

    experiment: ExperimentRecord
    config_text: str
    hparam_names: tuple[str, ...]
    metric_names: tuple[str, ...]
    trials: tuple[TrialRow, ...]
    best_trial_id: Optional[int]
    rungs: tuple[RungRow, ...]


def experiment_page(
    store: ExperimentStore, experiment_id: int, sort: str = "", descending: Optional[bool] = None
) -> ExperimentPage:
    """The experiment page's content, its trials sorted by ``sort`` (default: best searcher metric first).

    Raises:
        UnknownIdError: there is no experiment ``experiment_id``.
    """
    return _experiment_page(
        store, experiment_id, store.experiment_metrics(experiment_id, MetricKind.VALIDATION), sort, descending
    )


def _experiment_page(
    store: ExperimentStore,
    experiment_id: int,
    validation_records: list[MetricRecord],
    sort: str = "",
    descending: Optional[bool] = None,
) -> ExperimentPage:
    experiment = store.experiment(experiment_id)
    trials = store.trials(experiment_id)
    validations = _by_trial(validation_records)
    rows = [_trial_row(experiment, trial, validations.get(trial.id, [])) for trial in trials]
    hparam_names = sorted({name for row in rows for name in row.hparams})
    metric_names = sorted({name for row in rows for name in row.metrics})
    best = _best_row(rows, experiment.smaller_is_better)
    if not sort:
        sort, descending = "best", not experiment.smaller_is_better
    return ExperimentPage(
        experiment=experiment,
        config_text=yaml.safe_dump(experiment.config, sort_keys=False, default_flow_style=False),
        hparam_names=tuple(hparam_names),
        metric_names=tuple(metric_names),
        trials=tuple(sort_trials(rows, sort, bool(descending))),
        best_trial_id=None if best is None else best.id,
        rungs=tuple(_rungs(store, experiment, trials)),
    )


def _by_trial(records: list[MetricRecord]) -> dict[int, list[MetricRecord]]:
    found: dict[int, list[MetricRecord]] = {}
    for record in records:
        found.setdefault(record.trial_id, []).append(record)
    return found


def _trial_row(experiment: ExperimentRecord, trial: TrialRecord, validations: list[MetricRecord]) -> TrialRow:
    values = [_number(record.metrics.get(experiment.searcher_metric)) for record in validations]
    finite = [value for value in values if value is not None]
    best = (min if experiment.smaller_is_better else max)(finite) if finite else None
    return TrialRow(
        id=trial.id,
        state=trial.state.value,
        batches=trial.batches_trained,
        restarts=trial.restarts,
        hparams=flatten(trial.hparams),
        metrics={name: _plain(value) for name, value in validations[-1].metrics.items()} if validations else {},
        searcher_value=best,
    )


def _best_row(rows: list[TrialRow], smaller_is_better: bool) -> Optional[TrialRow]:
    scored = [row for row in rows if row.searcher_value is not None]
    if not scored:
        return None
    pick = min if smaller_is_better else max
    return pick(scored, key=lambda row: row.searcher_value or 0.0)


def flatten(hparams: dict[str, Any], prefix: str = "") -> dict[str, Value]:
    """Nested hyperparameters as one level of dotted names: ``{"opt": {"lr": 0.1}}`` -> ``{"opt.lr": 0.1}``."""
    flat: dict[str, Value] = {}
    for name, value in hparams.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = _plain(value)
    return flat


def _plain(value: Any) -> Value:
    """A value a cell or an axis can show: numbers, strings and booleans as they are, anything else as text."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return str(value)


def _number(value: Any) -> Optional[float]:
    """A finite number, or None (text, booleans, NaN and infinities are not points of a curve)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _rungs(store: ExperimentStore, experiment: ExperimentRecord, trials: list[TrialRecord]) -> list[RungRow]:
    """The rungs of an adaptive ASHA search; none for any other searcher."""
    if experiment.config.get("searcher", {}).get("name") != "adaptive_asha":
        return []
    trial_of = {trial.request_id: trial.id for trial in trials if trial.request_id is not None}
    config = load_experiment_config(experiment.config)
    # The unit of searcher.max_length ({"epochs": 16}), which the rungs' lengths are in.
    unit = next(iter(experiment.config["searcher"].get("max_length") or {"batches": 0}))
    return [
        RungRow(
            rung.bracket,
            rung.index,
            rung.length,
            unit,
            tuple(trial_of[rid] for rid, _ in rung.entries if rid in trial_of),
        )
        for rung in asha_rungs(config, saved_method_state(store, experiment.id))
    ]


# Charts: Plotly figures as plain data (traces and layouts), drawn by the page with Plotly.react.


def experiment_charts(store: ExperimentStore, experiment_id: int) -> dict[str, Any]:
    """The experiment page's charts: learning curves per metric, and for a search the parallel coordinates and scatters.

    Returns:
        ``{"curves": [{"label", "title", "traces"}], "parcoords": trace or None, "scatter": [{"hparam", "title",
        "trace"}], "best_trial_id": id or None, "metric": searcher metric}``: ``label`` as written, for the page's
        text; ``title`` and the traces' text escaped for Plotly (:func:`plotly_text`).
    """
    # The validations are read once, for the trial rows and for the curves: they are most of the work.
    validations = store.experiment_metrics(experiment_id, MetricKind.VALIDATION)
    page = _experiment_page(store, experiment_id, validations)
    curves = []
    for kind in (MetricKind.TRAINING, MetricKind.VALIDATION):
        records = validations if kind is MetricKind.VALIDATION else store.experiment_metrics(experiment_id, kind)
        for title, traces in learning_curves(records, kind, page.best_trial_id).items():
            curves.append({"label": title, "title": plotly_text(title), "traces": traces})
    rows = sorted(page.trials, key=lambda row: row.id)
    searched = page.experiment.is_search
    return {
        "curves": curves,
        "parcoords": parallel_coordinates(rows, page.hparam_names, page.experiment.searcher_metric)
        if searched
        else None,
        "scatter": scatters(rows, page.hparam_names, page.experiment.searcher_metric) if searched else [],
        "best_trial_id": page.best_trial_id,
        "metric": page.experiment.searcher_metric,
        "metric_title": plotly_text(page.experiment.searcher_metric),
    }


def plotly_text(text: str) -> str:
    """User-written text for Plotly's labels, which read a subset of HTML (``<b>``, ``<a href>``): escaped.

    Plotly turns the entities back into characters, so ``<script>`` shows as written.
    """
    return html.escape(str(text), quote=False)


def learning_curves(
    records: list[MetricRecord], kind: MetricKind, best_trial_id: Optional[int] = None
) -> dict[str, list[dict[str, Any]]]:
    """One chart per metric (``"validation accuracy"``), a line per trial against batches; the best one thicker.

    The keys are the charts' titles as written (for the page's text); the traces' text is escaped for Plotly.
    """
    points: dict[str, dict[int, tuple[list[int], list[float]]]] = {}
    for record in records:
        for name, value in record.metrics.items():
            number = _number(value)
            if number is None:
                continue
            xs, ys = points.setdefault(f"{kind.value} {name}", {}).setdefault(record.trial_id, ([], []))
            xs.append(record.batches)
            ys.append(number)
    return {
        title: [
            {
                "type": "scattergl" if len(xs) > 500 else "scatter",
                "mode": "lines+markers" if kind is MetricKind.VALIDATION else "lines",
                "name": f"trial {trial_id}" + (" (best)" if trial_id == best_trial_id else ""),
                "x": xs,
                "y": ys,
                "line": {"width": 4 if trial_id == best_trial_id else 1.5},
                "opacity": 1.0 if best_trial_id is None or trial_id == best_trial_id else 0.6,
                "meta": trial_id,
            }
            for trial_id, (xs, ys) in sorted(by_trial.items())
        ]
        for title, by_trial in sorted(points.items())
    }


def _axis(values: list[Value]) -> dict[str, Any]:
    """A parallel-coordinates dimension's values: numbers as they are; anything else as an index, labelled."""
    if all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values):
        return {"values": values}
    labels = sorted({str(value) for value in values})
    index = {label: position for position, label in enumerate(labels)}
    return {
        "values": [index[str(value)] for value in values],
        "tickvals": list(range(len(labels))),
        "ticktext": [plotly_text(label) for label in labels],
    }


def parallel_coordinates(rows: list[TrialRow], hparam_names: tuple[str, ...], metric: str) -> Optional[dict[str, Any]]:
    """A Plotly ``parcoords`` trace: an axis per hyperparameter that varies, then the searcher metric; a line per trial.

    Only trials with a value of the metric are drawn; the line's colour is that value.
    """
    scored = [row for row in rows if row.searcher_value is not None]
    if not scored:
        return None
    varying = [name for name in hparam_names if len({str(row.hparams.get(name)) for row in scored}) > 1]
    dimensions = [{"label": plotly_text(name), **_axis([row.hparams.get(name) for row in scored])} for name in varying]
    values = [row.searcher_value for row in scored]
    dimensions.append({"label": plotly_text(metric), "values": values})
    return {
        "type": "parcoords",
        "dimensions": dimensions,
        "line": {"color": values, "colorscale": "Viridis", "showscale": True},
        "meta": [row.id for row in scored],
    }


def scatters(rows: list[TrialRow], hparam_names: tuple[str, ...], metric: str) -> list[dict[str, Any]]:
    """One scatter per hyperparameter that varies: the searcher metric against it, a point per trial."""
    scored = [row for row in rows if row.searcher_value is not None]
    found = []
    for name in hparam_names:
        xs = [row.hparams.get(name) for row in scored]
        if len({str(x) for x in xs}) < 2:
            continue
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
        trace = {
            "type": "scatter",
            "mode": "markers",
            "x": xs if numeric else [plotly_text(str(x)) for x in xs],
            "y": [row.searcher_value for row in scored],
            "text": [f"trial {row.id}" for row in scored],
            "name": plotly_text(name),
        }
        found.append(
            {
                "hparam": name,
                "title": plotly_text(f"{metric} against {name}"),
                "trace": trace,
                # Numbers among text ("8", "wide") would make Plotly guess a numeric axis and drop the text.
                "xaxis_type": "linear" if numeric else "category",
            }
        )
    return found


@dataclass(frozen=True)
class CheckpointView:
    """A checkpoint as the trial page shows it, with the Python calls that load it."""

    record: CheckpointRecord
    load_calls: tuple[str, ...]


@dataclass(frozen=True)
class TrialPage:
    """Everything the trial page shows but its log (``ExperimentStore.read_log``)."""

    experiment: ExperimentRecord
    trial: TrialRecord
    hparams: dict[str, Value]
    validation_names: tuple[str, ...]
    validations: tuple[MetricRecord, ...]
    runs: tuple[TrialRunRecord, ...]
    restarts: tuple[RestartRecord, ...]
    checkpoints: tuple[CheckpointView, ...]

    def error_line(self, run: TrialRunRecord) -> str:
        """The error that ended a run, on one line as the command shows a cause: ``rank 1: ValueError: ...``."""
        if not run.error:
            return ""
        rank, kind, message = run.error.get("rank"), run.error.get("type"), run.error.get("message") or ""
        return ": ".join(part for part in (f"rank {rank}" if rank is not None else "", kind or "", message) if part)


def trial_page(store: ExperimentStore, trial_id: int) -> TrialPage:
    """The trial page's content.

    Raises:
        UnknownIdError: there is no trial ``trial_id``.
    """
    trial = store.trial(trial_id)
    validations = store.metrics(trial_id, MetricKind.VALIDATION)
    checkpoints = [
        CheckpointView(record, tuple(load_calls(record.path, record.uuid, checkpoint_kind(record.path))))
        for record in store.checkpoints(trial.experiment_id, trial_id=trial_id)
    ]
    return TrialPage(
        experiment=store.experiment(trial.experiment_id),
        trial=trial,
        hparams=flatten(trial.hparams),
        validation_names=tuple(sorted({name for record in validations for name in record.metrics})),
        validations=tuple(validations),
        runs=tuple(store.trial_runs(trial_id)),
        restarts=tuple(store.restarts(trial_id)),
        checkpoints=tuple(checkpoints),
    )

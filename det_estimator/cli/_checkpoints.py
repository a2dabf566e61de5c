"""The checkpoint commands: list an experiment's checkpoints, describe one, download one."""

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind, keras_checkpoint, load_calls
from det_estimator.checkpoint import CheckpointCopyError, copy_checkpoint, read_checkpoint
from det_estimator.cli._experiments import UsageError
from det_estimator.cli._output import format_time, print_table
from det_estimator.errors import DetEstimatorError
from det_estimator.orchestration import format_metrics, format_size, print_json
from det_estimator.store import CheckpointRecord, ExperimentRecord, ExperimentStore, to_json_value

# How many of the checkpoints an ambiguous uuid prefix matches are named.
_AMBIGUOUS_SHOWN = 5
# The fewest first characters of a uuid that name its checkpoint.
_SHORTEST_START = 4


def list_checkpoints(store: ExperimentStore, args: argparse.Namespace) -> int:
    """An experiment's checkpoints: uuid, trial, batches, state, what it is kept as, metrics, size, path."""
    experiment = store.experiment(args.experiment_id)  # an unknown id is a usage error, not an empty list
    checkpoints = store.checkpoints(args.experiment_id, include_deleted=args.all)
    kept_as = _kept_as(store, experiment, checkpoints)
    if args.json:
        print_json([{**to_json_value(c), "kept_as": kept_as.get(c.uuid, [])} for c in checkpoints], sys.stdout)
        return 0
    if not checkpoints:
        print(f"Experiment {args.experiment_id} has no checkpoints.")
        return 0
    rows = [
        [
            c.uuid,
            c.trial_id,
            c.batches,
            c.state,
            ", ".join(kept_as.get(c.uuid, [])) or "-",
            format_metrics(c.validation_metrics or {}) or "-",
            format_size(c.size_bytes),
            c.path,
        ]
        for c in checkpoints
    ]
    print_table(["UUID", "TRIAL", "BATCHES", "STATE", "KEPT AS", "VALIDATION METRICS", "SIZE", "PATH"], rows)
    return 0


def _kept_as(
    store: ExperimentStore, experiment: ExperimentRecord, checkpoints: list[CheckpointRecord]
) -> dict[str, list[str]]:
    """What each checkpoint is kept as, by uuid: "best", "latest", both or neither.

    "best": the experiment's best by its searcher metric (as ``save_experiment_best``
    ranks them); "latest": its trial's latest, which a resume starts from. Only
    checkpoints still on disk are either.
    """
    kept_as: dict[str, list[str]] = {}
    for uuid in store.best_checkpoints(experiment.id, experiment.searcher_metric, experiment.smaller_is_better, 1):
        kept_as.setdefault(uuid, []).append("best")
    latest: dict[int, CheckpointRecord] = {}
    for checkpoint in checkpoints:  # oldest first
        if checkpoint.state == "COMPLETED":
            latest[checkpoint.trial_id] = checkpoint
    for checkpoint in latest.values():
        kept_as.setdefault(checkpoint.uuid, []).append("latest")
    return kept_as


def find_checkpoint(store: ExperimentStore, uuid: str) -> CheckpointRecord:
    """The checkpoint of this uuid, or the one checkpoint whose uuid starts with it (4 characters at least).

    Raises:
        UsageError: no checkpoint's uuid is or starts with ``uuid``, or several start with it.
    """
    found = store.checkpoints_starting_with(uuid, _AMBIGUOUS_SHOWN + 1)
    if found and found[0].uuid == uuid:  # an exact uuid sorts before those it starts
        return found[0]
    if len(uuid) < _SHORTEST_START:
        # A few characters name a checkpoint by chance as often as not; an id (`describe 1`) is meant elsewhere.
        found = []
    if len(found) == 1:
        return found[0]
    if not found:
        listing = f"checkpoint list {uuid}" if uuid.isdigit() else "checkpoint list EXPERIMENT_ID"
        raise UsageError(
            f"There is no checkpoint {uuid} in the store {store.location}. Give a checkpoint's uuid, or at least its "
            f"first {_SHORTEST_START} characters, as `det-estimator {listing}` shows it."
        )
    many = f"more than {_AMBIGUOUS_SHOWN}" if len(found) > _AMBIGUOUS_SHOWN else str(len(found))
    named = ", ".join(c.uuid for c in found[:_AMBIGUOUS_SHOWN])
    raise UsageError(
        f"{uuid} starts the uuids of {many} checkpoints ({named}{', ...' if len(found) > _AMBIGUOUS_SHOWN else ''}). "
        "Give more of the uuid, or all of it."
    )


@dataclass
class _OnDisk:
    """What a checkpoint's directory holds, as its manifest lists it.

    Attributes:
        path: the checkpoint's directory.
        gone: why there are no files to show ("" when they are there).
        files: its manifest: each file's path, sha256 and size.
        metadata_size: the bytes of its ``metadata.json``.
        problems: what differs from the manifest (missing files, other sizes, files added).
        kind: what wrote it, read from its files; None for a script's own files.
        saved_models: its SavedModels, by serving name.
    """

    path: Path
    gone: str = ""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata_size: int = 0
    problems: list[str] = field(default_factory=list)
    kind: Optional[CheckpointKind] = None
    saved_models: dict[str, Path] = field(default_factory=dict)


def _on_disk(record: CheckpointRecord, path: Optional[Path] = None) -> _OnDisk:
    """The checkpoint's files (or those of its copy at ``path``), checked against its manifest by their sizes."""
    path = Path(record.path) if path is None else path
    if record.state != "COMPLETED":
        return _OnDisk(path, gone="deleted by checkpoint retention")
    if not path.is_dir():
        return _OnDisk(path, gone=f"its directory {path} is gone (removed outside det-estimator)")
    kind = checkpoint_kind(path)
    shown = _OnDisk(path, kind=kind, saved_models=kind.saved_models(path) if kind else {})
    try:
        checkpoint = read_checkpoint(path)
    except ValueError as error:
        shown.gone = str(error)
        return shown
    shown.files = dict(checkpoint.metadata["files"])
    shown.metadata_size = (path / "metadata.json").stat().st_size
    shown.problems = checkpoint.verify(checksums=False)
    return shown


def _load_with(record: CheckpointRecord, on_disk: _OnDisk) -> list[str]:
    """The Python calls that load the checkpoint at ``on_disk.path``: one, or one per SavedModel of an estimator's."""
    if on_disk.gone and on_disk.kind is None:
        return []
    return load_calls(on_disk.path, record.uuid, on_disk.kind)


def _framework(metadata: dict[str, Any]) -> str:
    """The versions a checkpoint was written with: a dict of them, or the string older callback checkpoints hold."""
    framework = metadata.get("framework")
    if isinstance(framework, dict):
        return ", ".join(f"{name} {version}" for name, version in framework.items()) or "-"
    return "-" if framework is None else str(framework)


def describe_checkpoint(store: ExperimentStore, args: argparse.Namespace) -> int:
    """One checkpoint: its trial, state, what it is kept as, metrics, size, files, trial type and how to load it."""
    record = find_checkpoint(store, args.uuid)
    experiment = store.experiment(store.trial(record.trial_id).experiment_id)
    kept_as = _kept_as(store, experiment, store.checkpoints(experiment.id)).get(record.uuid, [])
    on_disk = _on_disk(record)
    load_with = _load_with(record, on_disk)
    if args.json:
        shown = {
            **to_json_value(record),
            "experiment_id": experiment.id,
            "kept_as": kept_as,
            "trial_type": on_disk.kind.written_by(on_disk.path) if on_disk.kind else None,
            "checkpoint_kind": record.metadata.get("checkpoint_kind"),
            "keras_format": _keras_format(on_disk),
            "framework": record.metadata.get("framework"),
            "files": None if on_disk.gone else on_disk.files,
            "problems": on_disk.problems or ([on_disk.gone] if on_disk.gone else []),
            "saved_models": {name: str(path) for name, path in on_disk.saved_models.items()},
            "load_with": load_with,
        }
        print_json(shown, sys.stdout)
        return 0
    fields = [
        ("Checkpoint", record.uuid),
        ("Experiment", f"{experiment.id} {experiment.name}"),
        ("Trial", record.trial_id),
        ("Batches", record.batches),
        ("State", record.state),
        ("Kept as", ", ".join(kept_as) or "-"),
        ("Created", format_time(record.created_at)),
        ("Validation", format_metrics(record.validation_metrics or {}) or "-"),
        ("Size", format_size(record.size_bytes)),
        ("Path", record.path),
        ("Trial type", _trial_type(on_disk)),
        *([("Format", format_line)] if (format_line := _format_line(on_disk)) else []),
        ("Framework", _framework(record.metadata)),
        ("Files", _files_line(on_disk)),
    ]
    for label, value in fields:
        print(f"{label + ':':<13}{value}")
    for problem in on_disk.problems:
        print(f"{'':13}{problem}")
    if on_disk.files:
        print("\n".join(_files_table(on_disk)))
    lines = load_with or [_why_nothing_loads(on_disk)]
    print(f"{'Load with:':<13}{lines[0]}")
    for line in lines[1:]:
        print(f"{'':13}{line}")
    return 0


def _keras_format(on_disk: _OnDisk) -> Optional[int]:
    """The Keras checkpoint format (1 for the layouts written before it had a number); None for other kinds."""
    if on_disk.kind is CheckpointKind.KERAS:
        return keras_checkpoint(on_disk.path).get("format")
    return 1 if on_disk.kind in (CheckpointKind.KERAS_TRIAL, CheckpointKind.KERAS_CALLBACK) else None


def _format_line(on_disk: _OnDisk) -> Optional[str]:
    """The Format line of a Keras checkpoint; None for other kinds."""
    kind = on_disk.kind
    if kind is CheckpointKind.KERAS:
        number = _keras_format(on_disk)
        return f"Keras checkpoint format {number} (its kind and files named in metadata.json)" if number else None
    if kind in (CheckpointKind.KERAS_TRIAL, CheckpointKind.KERAS_CALLBACK):
        return f"the {kind.trial_type} layout written before the one Keras checkpoint format (read only)"
    return None


def _trial_type(on_disk: _OnDisk) -> str:
    if on_disk.kind is not None:
        return on_disk.kind.written_by(on_disk.path)
    return "-" if on_disk.gone else "none: a Core API script's own files"


def _files_line(on_disk: _OnDisk) -> str:
    if on_disk.gone:
        return f"none: {on_disk.gone}"
    count = len(on_disk.files) + 1  # metadata.json
    if not on_disk.problems:
        return f"{count}, all there with the sizes they were sealed with"
    wrong = len(on_disk.problems)
    return f"{count} in its manifest, and {wrong} problem{'' if wrong == 1 else 's'}:"


def _files_table(on_disk: _OnDisk) -> list[str]:
    """The files by top-level entry: how many, their size, and which hold SavedModels."""
    groups: dict[str, list[int]] = {}
    for name, entry in on_disk.files.items():
        top, _, rest = name.partition("/")
        counted = groups.setdefault(f"{top}/" if rest else top, [0, 0])
        counted[0] += 1
        counted[1] += entry["size"]
    groups["metadata.json"] = [1, on_disk.metadata_size]
    served: dict[str, list[str]] = {}
    for name, path in on_disk.saved_models.items():
        served.setdefault(f"{path.relative_to(on_disk.path).parts[0]}/", []).append(name)
    rows = [
        (
            entry,
            f"{count} file{'' if count == 1 else 's'}",
            format_size(size),
            _saved_models_note(on_disk, served, entry),
        )
        for entry, (count, size) in sorted(groups.items())
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    return [
        f"  {entry:<{widths[0]}}  {count:<{widths[1]}}  {size:>{widths[2]}}  {note}".rstrip()
        for entry, count, size, note in rows
    ]


def _saved_models_note(on_disk: _OnDisk, served: dict[str, list[str]], entry: str) -> str:
    """What a top-level entry holds when it is a SavedModel (or, in det-estimator 0.1's layout, several)."""
    names = served.get(entry)
    if not names:
        return ""
    if on_disk.kind is not CheckpointKind.ESTIMATOR:
        return "SavedModel"
    if len(names) == 1:
        return f"SavedModel of serving function {names[0]}"
    return f"SavedModels of serving functions {', '.join(names)}"


def _why_nothing_loads(on_disk: _OnDisk) -> str:
    if on_disk.gone:
        return "nothing: its files are gone"
    return "nothing: it holds no SavedModel (the trial's build_serving_input_receiver_fns() returned none)"


def download_checkpoint(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Copies a checkpoint's files into a new directory, each checked against the checkpoint's manifest.

    The copy is made in a hidden sibling of the directory and renamed to it once every
    file matched, so the directory is either absent or complete.
    """
    record = find_checkpoint(store, args.uuid)
    output = Path(args.output_dir) if args.output_dir is not None else Path("checkpoints") / record.uuid
    refused = f"Checkpoint {record.uuid} cannot be downloaded"
    if record.state != "COMPLETED":
        raise UsageError(
            f"{refused}: checkpoint retention deleted its files. `det-estimator checkpoint list "
            f"{store.trial(record.trial_id).experiment_id}` shows the checkpoints its experiment kept."
        )
    try:
        copied = copy_checkpoint(Path(record.path), output)
    except CheckpointCopyError as error:
        problems = "".join(f"\n  {problem}" for problem in error.problems)
        raise UsageError(f"{refused}: {error}{problems}") from None
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        raise DetEstimatorError(
            f"{refused} to {output}: {error.strerror or error}{where}. Nothing was left there."
        ) from None
    load_with = _load_with(record, _on_disk(record, copied.checkpoint.path))
    if args.json:
        shown = {
            "uuid": record.uuid,
            "output_dir": str(copied.checkpoint.path),
            "files": copied.files,
            "size_bytes": copied.size_bytes,
            "load_with": load_with,
        }
        print_json(shown, sys.stdout)
        return 0
    files = f"{copied.files} file{'' if copied.files == 1 else 's'}"
    print(
        f"Downloaded checkpoint {record.uuid} ({files}, {format_size(copied.size_bytes)}, each checked against "
        f"its manifest) to {output}"
    )
    lines = load_with or [_why_nothing_loads(_on_disk(record, copied.checkpoint.path))]
    print(f"{'Load with:':<13}{lines[0]}")
    for line in lines[1:]:
        print(f"{'':13}{line}")
    return 0

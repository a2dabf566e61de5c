"""``checkpoint describe``: a checkpoint's record, its files as its manifest lists them, the call that loads it."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from det_estimator.store import ExperimentStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment, run_command  # noqa: E402
from sealed_checkpoints import ESTIMATOR_FILES, seal  # noqa: E402

# Per trial type: its files, and how the call that loads it starts.
KINDS = {
    "EstimatorTrial": (
        ESTIMATOR_FILES,
        "det.estimator.load_estimator_from_checkpoint_path({path!r}, serving_name='raw')",
    ),
    "TFKerasTrial": (
        {"model/state.index": b"s", "saved_model/saved_model.pb": b"p", "callbacks.json": b"{}"},
        "det.keras.load_model_from_checkpoint_path({path!r}, model=<a model built as in training>)",
    ),
    "DeterminedCallback": (
        {"model_checkpoint.index": b"w", "callback_state.json": b"{}", "model_architecture.json": b"{}"},
        "context.load_checkpoint_model(checkpoint_uuid={uuid!r}) of det.keras.init(), or "
        "tf.train.Checkpoint(model=model).read({weights!r})",
    ),
    None: ({"weights.npz": b"w"}, "core.checkpoint.restore_path({uuid!r}) of det.core.init()"),
}
FRAMEWORK = {"det_estimator": "0.2.0", "tensorflow": "2.15.1"}


def describe(store_path: Path, uuid: str, *options: str, status: int = 0) -> str:
    code, output = run_command(["--store", str(store_path), "checkpoint", "describe", uuid, *options])
    assert code == status, output
    assert "Traceback" not in output, output
    return output


def fields(output: str) -> dict[str, str]:
    """The ``Label:   value`` lines of the text output."""
    return {line[:13].rstrip(" :"): line[13:] for line in output.splitlines() if line[:1] != " " and ":" in line[:13]}


@pytest.fixture
def store_path(tmp_path) -> Path:
    return record_one_experiment(tmp_path)  # searcher metric: loss, smaller is better


def test_describe_shows_the_record_the_files_and_the_call_that_loads_an_estimator_checkpoint(store_path):
    path = seal(store_path, ESTIMATOR_FILES, 4, framework=FRAMEWORK, validation_metrics={"loss": 0.25})
    uuid = path.name

    output = describe(store_path, uuid)

    shown = fields(output)
    assert shown["Checkpoint"] == uuid
    assert shown["Experiment"] == "1 analytic"
    assert (shown["Trial"], shown["Batches"], shown["State"]) == ("1", "4", "COMPLETED")
    assert shown["Kept as"] == "best, latest"
    assert shown["Validation"] == "loss 0.25"
    assert shown["Path"] == str(path)
    assert shown["Trial type"] == "EstimatorTrial"
    assert shown["Framework"] == "det_estimator 0.2.0, tensorflow 2.15.1"
    assert shown["Files"].startswith("7, all there")  # the manifest's 6 and metadata.json
    table = [line.split() for line in output.splitlines() if line.startswith("  ")]
    assert [row[:3] for row in table] == [
        ["input/", "1", "file"],
        ["metadata.json", "1", "file"],
        ["model/", "3", "files"],
        ["raw/", "2", "files"],
    ]
    assert table[-1][-5:] == ["SavedModel", "of", "serving", "function", "raw"]
    assert shown["Load with"] == KINDS["EstimatorTrial"][1].format(path=str(path))

    as_json = json.loads(describe(store_path, uuid, "--json"))
    assert as_json["uuid"] == uuid and as_json["experiment_id"] == 1 and as_json["trial_id"] == 1
    assert as_json["kept_as"] == ["best", "latest"]
    assert as_json["trial_type"] == "EstimatorTrial"
    assert as_json["framework"] == FRAMEWORK
    assert as_json["validation_metrics"] == {"loss": 0.25}
    assert sorted(as_json["files"]) == sorted(ESTIMATOR_FILES)
    assert as_json["files"]["raw/saved_model.pb"]["size"] == 300
    assert as_json["saved_models"] == {"raw": str(path / "raw")}
    assert as_json["load_with"] == [shown["Load with"]] and as_json["problems"] == []


def test_what_describe_says_a_checkpoint_is_kept_as_is_what_checkpoint_list_says(store_path):
    best = seal(store_path, ESTIMATOR_FILES, 4, validation_metrics={"loss": 0.1}).name
    middle = seal(store_path, ESTIMATOR_FILES, 8, validation_metrics={"loss": 0.5}).name
    last = seal(store_path, ESTIMATOR_FILES, 12, validation_metrics={"loss": 0.3}).name
    code, listed = run_command(["--store", str(store_path), "checkpoint", "list", "1", "--json"])
    assert code == 0, listed
    kept_as = {entry["uuid"]: entry["kept_as"] for entry in json.loads(listed)}
    assert kept_as == {best: ["best"], middle: [], last: ["latest"]}
    for uuid, expected in kept_as.items():
        assert json.loads(describe(store_path, uuid, "--json"))["kept_as"] == expected
        assert fields(describe(store_path, uuid))["Kept as"] == (", ".join(expected) or "-")


@pytest.mark.parametrize("trial_type", list(KINDS), ids=lambda kind: str(kind))
def test_describe_names_what_wrote_a_checkpoint_and_the_call_that_loads_it(store_path, trial_type):
    files, load_with = KINDS[trial_type]
    path = seal(store_path, files, 4)

    as_json = json.loads(describe(store_path, path.name, "--json"))

    assert as_json["trial_type"] == trial_type
    expected = load_with.format(path=str(path), uuid=path.name, weights=str(path / "model_checkpoint"))
    assert len(as_json["load_with"]) == 1 and as_json["load_with"][0].startswith(expected)
    shown = fields(describe(store_path, path.name))
    assert shown["Trial type"].startswith(trial_type or "none: a Core API script")
    assert shown["Load with"] == as_json["load_with"][0]
    if trial_type == "TFKerasTrial":
        assert as_json["saved_models"] == {"saved_model": str(path / "saved_model")}


def test_an_estimator_checkpoint_without_a_serving_function_says_nothing_loads_it(store_path):
    path = seal(store_path, {name: data for name, data in ESTIMATOR_FILES.items() if not name.startswith("raw/")}, 4)
    assert json.loads(describe(store_path, path.name, "--json"))["load_with"] == []
    assert fields(describe(store_path, path.name))["Load with"].startswith("nothing: it holds no SavedModel")


def test_the_framework_is_shown_as_recorded_a_dict_of_versions_or_an_older_callback_checkpoints_string(store_path):
    with_versions = seal(store_path, KINDS["DeterminedCallback"][0], 4, framework=FRAMEWORK).name
    older = seal(store_path, KINDS["DeterminedCallback"][0], 8, framework="tensorflow-keras").name
    without = seal(store_path, KINDS[None][0], 12).name
    assert fields(describe(store_path, with_versions))["Framework"] == "det_estimator 0.2.0, tensorflow 2.15.1"
    assert fields(describe(store_path, older))["Framework"] == "tensorflow-keras"
    assert json.loads(describe(store_path, older, "--json"))["framework"] == "tensorflow-keras"
    assert fields(describe(store_path, without))["Framework"] == "-"


def test_a_unique_start_of_a_uuid_names_its_checkpoint_and_an_exact_uuid_wins_over_longer_ones(store_path):
    with ExperimentStore(store_path) as store:
        for uuid in ("abcd", "abcdef", "abce01", "abce02", "b0b0b0", "c1"):
            store.record_checkpoint(1, uuid, 1, str(store_path.parent / uuid), 0, {})
    assert fields(describe(store_path, "b0b0"))["Checkpoint"] == "b0b0b0"
    assert fields(describe(store_path, "abcde"))["Checkpoint"] == "abcdef"
    assert fields(describe(store_path, "abcd"))["Checkpoint"] == "abcd"  # not ambiguous: it is a uuid
    assert fields(describe(store_path, "c1"))["Checkpoint"] == "c1"  # a uuid, however short

    output = describe(store_path, "abce", status=2)
    assert "abce starts the uuids of 2 checkpoints (abce01, abce02). Give more of the uuid" in output, output
    output = describe(store_path, "xyzw", status=2)
    assert f"There is no checkpoint xyzw in the store {store_path}. Give a checkpoint's uuid" in output, output


def test_fewer_than_four_characters_name_no_checkpoint_but_their_own(store_path):
    with ExperimentStore(store_path) as store:
        store.record_checkpoint(1, "1a2b3c", 1, str(store_path.parent / "1a2b3c"), 0, {})
    # An experiment's id, given where a uuid is expected, does not pick a checkpoint whose uuid starts with it.
    output = describe(store_path, "1", status=2)
    assert (
        "Give a checkpoint's uuid, or at least its first 4 characters, as `det-estimator checkpoint list 1`" in output
    )
    assert "There is no checkpoint 1a2 in the store" in describe(store_path, "1a2", status=2)
    assert fields(describe(store_path, "1a2b"))["Checkpoint"] == "1a2b3c"


def test_an_ambiguous_start_names_five_of_its_checkpoints_at_most(store_path):
    with ExperimentStore(store_path) as store:
        for number in range(8):
            store.record_checkpoint(1, f"ffff{number}", 1, str(store_path.parent / str(number)), 0, {})
    output = describe(store_path, "ffff", status=2)
    assert "ffff starts the uuids of more than 5 checkpoints (ffff0, ffff1, ffff2, ffff3, ffff4, ...)" in output


def test_describe_says_which_files_are_gone_or_changed(store_path):
    path = seal(store_path, ESTIMATOR_FILES, 4)
    (path / "model" / "model.ckpt-4.index").unlink()
    (path / "raw" / "saved_model.pb").write_bytes(b"shorter")
    (path / "notes.txt").write_text("added by hand")

    output = describe(store_path, path.name)

    assert fields(output)["Files"] == "7 in its manifest, and 3 problems:"
    assert "model/model.ckpt-4.index: missing" in output
    assert "raw/saved_model.pb: size mismatch (expected 300 bytes, found 7)" in output
    assert "notes.txt: not in the manifest" in output
    assert len(json.loads(describe(store_path, path.name, "--json"))["problems"]) == 3


def test_describe_of_a_deleted_checkpoint_or_one_whose_directory_is_gone_shows_its_record(store_path):
    deleted = seal(store_path, ESTIMATOR_FILES, 4, validation_metrics={"loss": 0.5})
    shutil.rmtree(deleted)
    removed = seal(store_path, ESTIMATOR_FILES, 8)
    shutil.rmtree(removed)
    with ExperimentStore(store_path) as store:
        store.mark_checkpoints_deleted([deleted.name])

    shown = fields(describe(store_path, deleted.name))
    assert (shown["State"], shown["Validation"], shown["Trial type"]) == ("DELETED", "loss 0.5", "-")
    assert shown["Files"] == "none: deleted by checkpoint retention"
    assert shown["Load with"] == "nothing: its files are gone"
    as_json = json.loads(describe(store_path, deleted.name, "--json"))
    assert as_json["files"] is None and as_json["load_with"] == []

    shown = fields(describe(store_path, removed.name))
    assert shown["State"] == "COMPLETED"
    assert shown["Files"] == f"none: its directory {removed} is gone (removed outside det-estimator)"


def keras_format_2(written_by: str, saved_model: bool) -> tuple[dict[str, bytes], dict]:
    """The files and metadata of a checkpoint of the one Keras format, by ``written_by``."""
    files = {"model/state.index": b"s", "model/architecture.json": b"{}", "random_states.json": b"{}"}
    if saved_model:
        files["saved_model/saved_model.pb"] = b"p"
    contents = {
        "variables": "model/state",
        "architecture": "model/architecture.json",
        "saved_model": "saved_model" if saved_model else None,
        "random_states": "random_states.json",
    }
    described = {"format": 2, "written_by": written_by, "keras": "2.15.0", "contents": contents}
    return files, {"checkpoint_kind": "keras", "keras_checkpoint": described}


@pytest.mark.parametrize(
    ("written_by", "saved_model"), [("TFKerasTrial", True), ("DeterminedCallback", False), ("context.fit", False)]
)
def test_describe_names_the_keras_front_end_the_format_and_every_loader_from_the_metadata(
    store_path, written_by, saved_model
):
    files, metadata = keras_format_2(written_by, saved_model)
    path = seal(store_path, files, 4, **metadata)

    as_json = json.loads(describe(store_path, path.name, "--json"))

    assert as_json["trial_type"] == written_by
    assert (as_json["checkpoint_kind"], as_json["keras_format"]) == ("keras", 2)
    by_uuid = f"context.load_checkpoint_model(checkpoint_uuid={path.name!r}) of det.keras.init()"
    # Every front end's checkpoint with an architecture loads as a Keras model; format 2's variables
    # are no model.save_weights' (format 3's are).
    assert as_json["load_with"] == [f"det.keras.load_model_from_checkpoint_path({str(path)!r})", by_uuid]
    if saved_model:
        assert as_json["saved_models"] == {"saved_model": str(path / "saved_model")}
    else:
        assert as_json["saved_models"] == {}
    shown = fields(describe(store_path, path.name))
    assert shown["Trial type"] == written_by
    assert shown["Format"].startswith("Keras checkpoint format 2")
    assert shown["Load with"] == as_json["load_with"][0]


def test_describe_tells_a_keras_checkpoint_written_before_the_one_format_by_its_files(store_path):
    path = seal(store_path, KINDS["TFKerasTrial"][0], 4)
    as_json = json.loads(describe(store_path, path.name, "--json"))
    assert (as_json["checkpoint_kind"], as_json["keras_format"]) == (None, 1)
    assert "written before the one Keras checkpoint format" in fields(describe(store_path, path.name))["Format"]

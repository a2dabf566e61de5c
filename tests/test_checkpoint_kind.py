"""Each loader of a checkpoint loads its own kind and refuses the others, and what is no checkpoint, saying why.

The checkpoints are real ones, one of each kind: an EstimatorTrial's (the analytic
trial, with its ``raw`` SavedModel), a TFKerasTrial's (the analytic Keras trial's model)
and DeterminedCallback's (the linear regression of tests/keras_callback), the Keras ones
written as their trial types wrote them before the one Keras format
(tests/support/legacy_keras_checkpoints.py), whose kind their files tell.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import det_estimator as det
from det_estimator._checkpoint_kind import CheckpointKind, checkpoint_kind
from det_estimator.checkpoint import read_checkpoint
from det_estimator.config import load_experiment_config
from det_estimator.store import ExperimentStore

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS / "support"))
import legacy_keras_checkpoints as legacy  # noqa: E402


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, analytic, module_loader) -> dict[CheckpointKind, Path]:
    """The path of a checkpoint of each kind; the Keras ones in the layouts their trial types wrote first."""
    root = tmp_path_factory.mktemp("kinds")
    analytic_keras = module_loader(TESTS / "support" / "analytic_keras_trial.py")
    linear = module_loader(TESTS / "keras_callback" / "linear_script.py")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DET_ESTIMATOR_STORE", str(root / "store.sqlite"))
        estimator = det.run_trial(analytic.AnalyticTrial, analytic.make_config(root / "estimator", 1))
    raw = analytic_keras.make_config(root / "keras-trial", 1)
    context = det.keras.TFKerasTrialContext(load_experiment_config(raw), raw["hyperparameters"], 1)
    keras = analytic_keras.AnalyticKerasTrial(context).build_model()
    keras.fit(analytic_keras.FEATURES[:8, None], analytic_keras.TARGETS[:8, None], batch_size=8, verbose=0)
    legacy.write_trial_v1(root / "keras", keras, 1)
    callback = linear.build_model()
    callback.fit(linear.dataset(0, 1), epochs=1, verbose=0)
    legacy.write_callback_v1(root / "callback", callback, epoch=1, batch=0, steps_completed=8, continue_id="run")
    return {
        CheckpointKind.ESTIMATOR: Path(estimator.checkpoints[-1]["path"]),
        CheckpointKind.KERAS_TRIAL: root / "keras",
        CheckpointKind.KERAS_CALLBACK: root / "callback",
    }


def test_each_kind_is_known_by_its_files(checkpoints, tmp_path):
    for kind, path in checkpoints.items():
        assert checkpoint_kind(path) is kind
    assert checkpoint_kind(tmp_path) is None


def test_each_loader_loads_its_own_kind(checkpoints, analytic, module_loader):
    analytic_keras = module_loader(TESTS / "support" / "analytic_keras_trial.py")
    estimator = det.estimator.load_estimator_from_checkpoint_path(str(checkpoints[CheckpointKind.ESTIMATOR]))
    (outputs,) = estimator.signatures["serving_default"](x=tf.constant(analytic.SERVING_INPUT)).values()
    assert outputs.shape[0] == len(analytic.SERVING_INPUT) and np.all(np.isfinite(outputs.numpy()))
    # A TFKerasTrial's checkpoint of the first layout holds no architecture: it loads into a model built anew.
    raw = analytic_keras.make_config(Path("unused"), 1)
    context = det.keras.TFKerasTrialContext(load_experiment_config(raw), raw["hyperparameters"], 1)
    built = analytic_keras.AnalyticKerasTrial(context).build_model()
    keras = det.keras.load_model_from_checkpoint_path(checkpoints[CheckpointKind.KERAS_TRIAL], model=built)
    outputs = keras(tf.constant(analytic_keras.SERVING_INPUT))
    assert outputs.shape[0] == len(analytic_keras.SERVING_INPUT) and np.all(np.isfinite(outputs.numpy()))


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (
            CheckpointKind.KERAS_TRIAL,
            r"is a checkpoint of a TFKerasTrial, not of an EstimatorTrial: "
            r"load it with det\.keras\.load_model_from_checkpoint_path\('.*', model=<a model built as in training>\)\.",
        ),
        (
            CheckpointKind.KERAS_CALLBACK,
            r"is a checkpoint of det\.keras\.DeterminedCallback \(or context\.fit\), not of an EstimatorTrial: "
            r"load it with context\.load_checkpoint_model\(checkpoint_uuid=\.\.\.\) .*model_checkpoint",
        ),
    ],
)
def test_the_estimator_loader_refuses_a_keras_checkpoint_naming_its_loader(checkpoints, kind, message):
    with pytest.raises(ValueError, match=message):
        det.estimator.load_estimator_from_checkpoint_path(str(checkpoints[kind]))


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (
            CheckpointKind.ESTIMATOR,
            r"is a checkpoint of an EstimatorTrial \(its SavedModels: raw\), not of a TFKerasTrial: "
            r"load it with det\.estimator\.load_estimator_from_checkpoint_path\('.*', serving_name=\.\.\.\)\.",
        ),
    ],
)
def test_the_keras_loader_refuses_another_kind_naming_its_loader(checkpoints, kind, message):
    with pytest.raises(ValueError, match=message):
        det.keras.load_model_from_checkpoint_path(checkpoints[kind])


def test_the_keras_loader_refuses_an_estimator_checkpoint_below_the_path_or_one_of_its_exports(checkpoints, tmp_path):
    written = checkpoints[CheckpointKind.ESTIMATOR]
    below = tmp_path / "downloaded" / written.name
    shutil.copytree(written, below)
    for path in (tmp_path / "downloaded", written / "raw"):
        with pytest.raises(ValueError, match=r"is a checkpoint of an EstimatorTrial .*not of a TFKerasTrial"):
            det.keras.load_model_from_checkpoint_path(path)


@pytest.mark.parametrize(
    "load", [det.estimator.load_estimator_from_checkpoint_path, det.keras.load_model_from_checkpoint_path]
)
def test_a_path_that_is_no_directory_is_said_so(tmp_path, load):
    with pytest.raises(FileNotFoundError, match=r"There is no checkpoint at .*missing: no such file or directory\."):
        load(str(tmp_path / "missing"))
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(NotADirectoryError, match=r"notes\.txt is a file, not a checkpoint's directory\."):
        load(str(tmp_path / "notes.txt"))


def test_a_directory_that_is_no_checkpoint_is_not_said_to_be_one(tmp_path):
    (tmp_path / "logs").mkdir()
    with pytest.raises(
        ValueError, match=r"is not a checkpoint of an EstimatorTrial: it holds no model/ directory"
    ) as caught:
        det.estimator.load_estimator_from_checkpoint_path(str(tmp_path))
    assert "build_serving_input_receiver_fns" not in str(caught.value)


def test_an_estimator_checkpoint_without_serving_functions_is_said_to_have_none(checkpoints, tmp_path):
    copy = tmp_path / "no-exports"
    shutil.copytree(checkpoints[CheckpointKind.ESTIMATOR], copy, ignore=shutil.ignore_patterns("raw"))
    with pytest.raises(ValueError, match=r"has no SavedModel: the trial.s build_serving_input_receiver_fns"):
        det.estimator.load_estimator_from_checkpoint_path(str(copy))


@pytest.fixture(scope="module")
def keras_format(tmp_path_factory, analytic, module_loader) -> dict[str, Path]:
    """Checkpoints in the one Keras format, by the front end that wrote them."""
    root = tmp_path_factory.mktemp("keras-format")
    analytic_keras = module_loader(TESTS / "support" / "analytic_keras_trial.py")
    linear = module_loader(TESTS / "keras_callback" / "linear_script.py")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DET_ESTIMATOR_STORE", str(root / "store.sqlite"))
        trial = det.run_trial(analytic_keras.AnalyticKerasTrial, analytic_keras.make_config(root / "trial", 1))
        with det.core.init(checkpoint_storage=root / "callback") as core_context:
            callback = det.keras.DeterminedCallback(core_context, None, "run")
            linear.build_model().fit(linear.dataset(0, 1), epochs=1, callbacks=[callback], verbose=0)
            info = core_context.info
        with ExperimentStore(info.store_path) as store:
            (written,) = store.checkpoints(info.trial.experiment_id, trial_id=info.trial.trial_id)
    return {"TFKerasTrial": Path(trial.checkpoints[-1]["path"]), "DeterminedCallback": Path(written.path)}


def test_a_keras_checkpoint_names_its_kind_its_writer_and_its_files_in_its_metadata(keras_format):
    for written_by, path in keras_format.items():
        metadata = read_checkpoint(path).metadata
        assert metadata["checkpoint_kind"] == "keras"
        described = metadata["keras_checkpoint"]
        assert (described["format"], described["written_by"]) == (3, written_by)
        assert described["contents"]["variables"] == "model_checkpoint"
        assert checkpoint_kind(path) is CheckpointKind.KERAS
        assert CheckpointKind.KERAS.written_by(path) == written_by
        for name in filter(None, described["contents"].values()):
            assert list(path.glob(f"{name}*")), name
        assert (described["contents"]["saved_model"] is not None) == (written_by == "TFKerasTrial")
        assert described["contents"]["architecture"] == "model/architecture.json"


def test_the_keras_loader_loads_every_front_end_s_checkpoint_as_a_keras_model(keras_format, module_loader):
    analytic_keras = module_loader(TESTS / "support" / "analytic_keras_trial.py")
    linear = module_loader(TESTS / "keras_callback" / "linear_script.py")
    for written_by, rows in (("TFKerasTrial", analytic_keras.SERVING_INPUT), ("DeterminedCallback", linear.data()[0])):
        loaded = det.keras.load_model_from_checkpoint_path(keras_format[written_by])
        assert isinstance(loaded, tf.keras.Model)
        outputs = loaded(tf.constant(rows)).numpy()
        assert outputs.shape[0] == len(rows) and np.all(np.isfinite(outputs))


def test_the_estimator_loader_refuses_a_keras_checkpoint_naming_what_wrote_it_and_its_loaders(keras_format):
    with pytest.raises(
        ValueError,
        match=r"is a checkpoint of a TFKerasTrial \(the Keras checkpoint format\), not of an "
        r"EstimatorTrial: load it with det\.keras\.load_model_from_checkpoint_path\('.*'\) or "
        r"context\.load_checkpoint_model",
    ):
        det.estimator.load_estimator_from_checkpoint_path(str(keras_format["TFKerasTrial"]))
    with pytest.raises(
        ValueError,
        match=r"is a checkpoint of det\.keras\.DeterminedCallback \(the Keras checkpoint "
        r"format\), not of an EstimatorTrial: load it with det\.keras\.load_model_from_checkpoint_path\('.*'\) or "
        r"context\.load_checkpoint_model\(.*\) or model\.load_weights\('.*model_checkpoint'\)",
    ):
        det.estimator.load_estimator_from_checkpoint_path(str(keras_format["DeterminedCallback"]))

"""det.keras.init() on several processes of the TensorFlow launcher: the workers of one MultiWorkerMirroredStrategy.

Run by hand (``python3 -m det_estimator.launch.tensorflow --slots 2 -- python3 script.py``),
and as an experiment's trial under the launcher (as a trial runs where Horovod is
missing), paused and resumed; the metric policy test and the digits example's test run
it as an experiment's trial too.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from det_estimator.keras._engine import _keras_compat

from .conftest import WORKERS, assert_a_paused_dropout_run_resumes_to_the_uninterrupted_weights

sys.path.insert(0, str(WORKERS))
import under_strategy  # noqa: E402


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> list[dict]:
    directory = tmp_path_factory.mktemp("under_strategy")
    env = dict(
        os.environ, OUT=str(directory), DET_ESTIMATOR_STORE=str(directory / "store.sqlite"), TF_CPP_MIN_LOG_LEVEL="2"
    )
    command = [sys.executable, "-m", "det_estimator.launch.tensorflow", "--slots", "2", "--"]
    command += [sys.executable, str(WORKERS / "under_strategy.py")]
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=directory, timeout=240)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the script on 2 processes did not end within 240 s: {expired.stdout}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return [json.loads((directory / f"rank{rank}.json").read_text()) for rank in range(2)]


def test_every_process_is_a_worker_of_the_strategy_that_averages_the_gradients(reports):
    assert [(report["rank"], report["size"]) for report in reports] == [(0, 2), (1, 2)]
    assert all(report["spans_processes"] for report in reports)
    # The strategy averages the gradients: the optimizer is not wrapped.
    assert all(report["optimizer_as_given"] for report in reports)


def test_evaluate_gives_one_process_s_metrics_of_all_the_data(reports):
    model = under_strategy.build_model()
    model.compile(loss="binary_crossentropy", metrics=["accuracy", "AUC"])
    x, y = under_strategy.data()
    loss, accuracy, auc = model.evaluate(x, y, batch_size=8, verbose=0)
    for report in reports:
        assert report["evaluated"] == pytest.approx({"loss": loss, "accuracy": accuracy, "auc": auc}, rel=1e-5)


def test_predict_gives_every_process_the_predictions_of_the_whole_input_in_order(reports):
    x, _ = under_strategy.data()
    expected = under_strategy.build_model().predict(x, verbose=0)
    for report in reports:
        np.testing.assert_allclose(np.array(report["predicted"]), expected, rtol=1e-5, atol=1e-7)


def test_fit_refuses_a_sequence_saying_what_it_takes(reports):
    for report in reports:
        assert "arrays or a batched tf.data.Dataset" in report["sequence_refused"]
        assert "Received: Batches" in report["sequence_refused"]


# A pause in the second epoch, after each worker's short batch of the first (66 and 65
# records in batches of 4), resumed from its checkpoint: the workers of the strategy end
# with the weights of an uninterrupted run, dropout masks and all.
# tf-keras runs the Keras 2 code paths, which the estimator stack runs every time: a long run here.
@pytest.mark.parametrize("keras", ["tf.keras", pytest.param("tf-keras", marks=pytest.mark.slow)])
def test_a_paused_trial_of_the_strategy_resumes_to_the_uninterrupted_weights(tmp_path, monkeypatch, keras):
    if keras == "tf-keras" and not _keras_compat.KERAS_3:
        pytest.skip("tf.keras is Keras 2 here: the tf.keras case runs it already")
    assert_a_paused_dropout_run_resumes_to_the_uninterrupted_weights(
        tmp_path,
        monkeypatch,
        "python3 -m det_estimator.launch.tensorflow -- python3 fit_dropout.py",
        ["TF_USE_LEGACY_KERAS=1"] if keras == "tf-keras" else [],
    )

"""The two stacks: the estimator half refuses to import without tf.estimator, and ``env`` names the stack.

The refusal is tested by hiding tensorflow_estimator from a fresh interpreter (a module set
to None in sys.modules fails to import, as a missing one does), so it runs on the estimator
stack too; on the current stack it is what happens anyway.
"""

import importlib.util
import json
import re
import subprocess
import sys
import textwrap

import pytest

from det_estimator import _stack
from det_estimator._stack import StackReport
from det_estimator.cli._environment import stack_rows

# Each way the package exposes the estimator half, run in an interpreter without tensorflow_estimator.
_WITHOUT_ESTIMATOR = textwrap.dedent(
    """
    import importlib, json, sys
    sys.modules["tensorflow_estimator"] = None
    import det_estimator as det
    from det_estimator.errors import DetEstimatorError, EstimatorUnavailableError

    def attempt(code):
        try:
            exec(code, {"det": det, "importlib": importlib})
        except Exception as error:
            return {
                "type": type(error).__name__,
                "ours": isinstance(error, DetEstimatorError),
                "import_error": isinstance(error, ImportError),
                "message": str(error),
            }
        return None

    ways = [
        "import det_estimator.estimator",
        "import det_estimator.estimator._trial",
        "det.estimator.EstimatorTrial",
        "det.EstimatorTrial",
        "det.load_estimator_from_checkpoint_path",
        "det.RunHook",
        "det.experimental.estimator.init",
        "import det_estimator.experimental.estimator",
        "det.init(local=True)",
    ]
    refused = {way: attempt(way) for way in ways}
    # The rest of the package imports, and runs Keras trials alone.
    for name in ("det_estimator.core", "det_estimator.keras", "det_estimator.reducers", "det_estimator.cli",
                 "det_estimator.native", "det_estimator.orchestration", "det_estimator.worker._run"):
        importlib.import_module(name)
    from det_estimator.worker._run import trial_kinds
    print(json.dumps({"refused": refused, "kinds": trial_kinds(), "stack": det._stack.stack()}))
    """
)


@pytest.fixture(scope="module")
def without_estimator():
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ESTIMATOR],
        capture_output=True,
        text=True,
        timeout=300,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_way_to_the_estimator_half_raises_one_error_that_says_what_to_install(without_estimator):
    refused = without_estimator["refused"]
    for way, error in refused.items():
        assert error is not None, f"{way} did not raise"
        assert error["type"] == "EstimatorUnavailableError", (way, error)
        assert error["ours"] and error["import_error"], (way, error)
        assert "TensorFlow 2.16 and later ship no tf.estimator" in error["message"], (way, error)
        assert "pip install 'det-estimator[estimator]'" in error["message"], (way, error)
        assert "Python 3.9 to 3.11" in error["message"], (way, error)
    assert refused["det.RunHook"]["message"].startswith("det_estimator.hooks")
    assert refused["det.init(local=True)"]["message"].startswith("det.init()")
    assert refused["det.EstimatorTrial"]["message"].startswith("det_estimator.estimator")


def test_without_tf_estimator_the_rest_imports_and_keras_trials_run_alone(without_estimator):
    assert without_estimator["kinds"] == "TFKerasTrial"
    assert without_estimator["stack"] == "current"


def test_the_stack_is_the_estimator_one_exactly_where_tensorflow_estimator_is_installed():
    installed = importlib.util.find_spec("tensorflow_estimator") is not None
    assert _stack.has_estimator() is installed
    assert _stack.stack() == ("estimator" if installed else "current")


def test_require_estimator_passes_where_tf_estimator_is_and_refuses_where_it_is_not(monkeypatch):
    from det_estimator.errors import EstimatorUnavailableError

    monkeypatch.setitem(sys.modules, "tensorflow_estimator", None)
    with pytest.raises(EstimatorUnavailableError, match="my_module needs tf.estimator"):
        _stack.require_estimator("my_module")
    monkeypatch.setattr(_stack, "has_estimator", lambda: True)
    _stack.require_estimator("my_module")


@pytest.mark.parametrize(
    ("tensorflow", "legacy", "installed", "expected"),
    [
        ("2.15.1", False, {"keras": "2.15.0"}, "2.15.0 (tf.keras)"),
        ("2.15.1", True, {"keras": "2.15.0", "tf-keras": "2.15.1"}, "2.15.0 (tf.keras)"),
        ("2.21.0", False, {"keras": "3.15.1", "tf-keras": "2.21.0"}, "3.15.1 (Keras 3)"),
        ("2.21.0", True, {"keras": "3.15.1", "tf-keras": "2.21.0"}, "2.21.0 (tf-keras, TF_USE_LEGACY_KERAS=1)"),
        ("2.21.0", True, {"keras": "3.15.1"}, "tf-keras requested, not installed"),
        (None, False, {"keras": "3.15.1"}, None),
    ],
)
def test_the_keras_a_model_gets_follows_tensorflows_version_and_tf_use_legacy_keras(
    monkeypatch, tensorflow, legacy, installed, expected
):
    monkeypatch.setattr(_stack, "_version", installed.get)
    assert _stack.keras_in_use(tensorflow, legacy) == expected


def test_tf_use_legacy_keras_is_read_as_tensorflow_reads_it():
    assert _stack.legacy_keras_requested({"TF_USE_LEGACY_KERAS": "1"})
    assert _stack.legacy_keras_requested({"TF_USE_LEGACY_KERAS": "true"})
    assert not _stack.legacy_keras_requested({"TF_USE_LEGACY_KERAS": "0"})
    assert not _stack.legacy_keras_requested({})


def test_env_rows_say_what_each_stack_supports():
    estimator = stack_rows(StackReport("estimator", "2.15.1", "2.15.0 (tf.keras)", estimator=True, horovod=True))
    assert estimator["stack"].startswith("estimator")
    assert estimator["tf.estimator"].startswith("yes")
    assert estimator["horovod support"].startswith("yes")

    current = stack_rows(StackReport("current", "2.21.0", "3.15.1 (Keras 3)", estimator=False, horovod=False))
    assert current["stack"].startswith("current")
    assert current["keras"] == "3.15.1 (Keras 3)"
    assert current["tf.estimator"].startswith("no") and "det-estimator[estimator]" in current["tf.estimator"]
    assert current["horovod support"].startswith("no") and "MultiWorkerMirroredStrategy" in current["horovod support"]


def test_env_names_this_environments_stack_and_keras(monkeypatch, capsys):
    # `horovodrun --check-build` is slow and tests/test_cli.py checks its line; here it is a stand-in.
    from det_estimator.cli import _environment

    monkeypatch.setattr(_environment, "_horovod_build", lambda: "checked elsewhere")
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    assert _environment.show_environment() == 0
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert rows["stack"].split()[0] == _stack.stack()
    assert rows["tf.estimator"].startswith("yes" if _stack.has_estimator() else "no")
    assert rows["horovod support"].startswith("yes" if _stack.has_horovod() else "no")
    assert ("horovod built with" in rows) is _stack.has_horovod()
    import keras
    import tensorflow as tf

    assert rows["tensorflow"] == tf.__version__
    # Without TF_USE_LEGACY_KERAS, tf.keras is the keras distribution.
    assert rows["keras"].split()[0] == keras.__version__
    assert rows["keras"].endswith("(tf.keras)" if _stack.has_estimator() else "(Keras 3)")

"""A TFKerasTrial and a DeterminedCallback script on two hosts (network namespaces, as test_two_hosts.py makes).

Where Horovod is missing (the current stack), ``experiment create --hosts A:1,B:1`` has the
TensorFlow launcher start a process on each host itself, the remote one over ssh with the
launcher's environment, each with a ``TF_CONFIG`` that names every worker at an address
the other host reaches; the two train under one MultiWorkerMirroredStrategy. The trial
pauses and resumes to the analytic trial's closed form; the script (its entrypoint the
TensorFlow launcher) trains to plain Keras' weights.
"""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from det_estimator import launcher
from tests.conftest import load_module

HERE = Path(__file__).parent
SUPPORT = HERE.parent / "support"
RUN_TIMEOUT = 300

two = load_module(HERE / "two_hosts_support.py")
cli = two.cli
hosts, det = two.hosts, two.det  # the fixtures

pytestmark = [
    *two.requires_two_hosts,
    pytest.mark.timeout(3 * RUN_TIMEOUT),
    pytest.mark.skipif(
        launcher.horovod_installed(), reason="a trial's workers run under the TensorFlow launcher only without Horovod"
    ),
]


@pytest.fixture(scope="module")
def analytic_keras(module_loader):
    module_loader(SUPPORT / "analytic_closed_form.py")
    return module_loader(SUPPORT / "analytic_keras_trial.py")


def test_a_keras_trial_on_two_hosts_pauses_and_resumes_to_the_closed_form(det, hosts, analytic_keras, tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    for name in ("analytic_keras_trial.py", "analytic_closed_form.py"):
        shutil.copy(SUPPORT / name, context / name)
    config = analytic_keras.make_config(tmp_path, 30, "tfdata")
    config["hyperparameters"]["seconds_per_batch"] = 0.2
    path = cli.Context(context).write_config(raw=config)

    running = det.start("experiment", "create", path, context, "--hosts", hosts.hosts)
    running.wait_for("checkpoint ")
    # The second worker runs in the second host's namespace, started there over ssh.
    in_b = subprocess.run(["ip", "netns", "pids", hosts.b.namespace], capture_output=True, text=True).stdout.split()
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in in_b]
    assert any("det_estimator.worker" in command for command in commands), commands
    (experiment,) = det.json("experiment", "list")
    det.ok("experiment", "pause", experiment["id"])
    paused = running.finish(timeout=RUN_TIMEOUT)
    assert paused.returncode == 0, paused.stdout[-3000:] + paused.stderr[-3000:]
    assert det.json("experiment", "describe", experiment["id"])["state"] == "PAUSED"

    det.ok("experiment", "resume", experiment["id"], timeout=RUN_TIMEOUT)
    described = det.json("experiment", "describe", experiment["id"])
    assert described["state"] == "COMPLETED"
    (trial,) = described["trials"]
    assert [run["state"] for run in trial["runs"]] == ["PAUSED", "COMPLETED"]
    assert 0 < trial["runs"][1]["start_batches"] < 30
    assert trial["validations"][-1]["batches"] == 30
    analytic_keras.assert_closed_form(trial["validations"])


def test_a_determined_callback_script_on_two_hosts_trains_to_plain_keras_weights(det, hosts, tmp_path):
    linear = load_module(HERE.parent / "keras_callback" / "linear_script.py")
    context = tmp_path / "context"
    context.mkdir()
    shutil.copy(HERE.parent / "keras_callback" / "linear_script.py", context)
    config = {
        "name": "linear-callback",
        "entrypoint": "python3 -m det_estimator.launch.tensorflow -- python3 linear_script.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 32}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")},
        # The script's own variables reach the worker on the other host with the launcher's environment.
        "environment": {"environment_variables": [f"LINEAR_OUT={tmp_path / 'weights.npy'}"]},
        "max_restarts": 0,
    }
    path = cli.Context(context).write_config(raw=config)
    det.ok("experiment", "create", path, context, "--hosts", hosts.hosts, timeout=RUN_TIMEOUT)
    (experiment,) = det.json("experiment", "list")
    assert experiment["state"] == "COMPLETED" and experiment["batches_trained"] == 32

    model = linear.build_model()
    model.fit(linear.dataset(0, 1), epochs=4, verbose=0)
    plain = np.concatenate([w.numpy().ravel() for w in model.weights])
    np.testing.assert_allclose(np.load(tmp_path / "weights.npy"), plain, rtol=1e-5, atol=1e-6)

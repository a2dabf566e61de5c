"""A DeterminedCallback script written against the reference's guide (det.LOG_FORMAT) runs with only its import changed.

On 1 process and on 2 (the TensorFlow launcher's MultiWorkerMirroredStrategy) it pauses
and resumes exactly (the same final weights as an uninterrupted run), and its checkpoint
loads the reference's way: ``model.load_weights(<checkpoint>/model_checkpoint)``.
"""

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from det_estimator.keras._engine._keras_compat import KERAS_3

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import keras_porting_support as cli  # noqa: E402

# The reference's callback writes and reads its checkpoints with Keras 2's save_weights / load_weights.
pytestmark = pytest.mark.skipif(KERAS_3, reason="model.load_weights of a TensorFlow checkpoint needs Keras 2")


def script(context: Path):
    spec = importlib.util.spec_from_file_location("porting_train", context / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("slots", [1, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.timeout(900)
def test_a_paused_script_resumes_to_the_weights_of_an_uninterrupted_one_and_loads_as_the_reference_s(tmp_path, slots):
    context = cli.copy_context(HERE / "keras_callback", tmp_path)
    store = tmp_path / "store.sqlite"
    stopped = cli.pause_after_first_checkpoint(
        store, cli.write_config(context, "long.yaml", {"epochs": 100_000}, slots), context
    )
    epochs = stopped // 8 + 2  # 8 batches an epoch: the epoch of the pause and the next
    cli.set_length(store, 1, {"epochs": epochs})
    resumed = cli.det_command(store, "experiment", "resume", 1)
    assert f"COMPLETED after {epochs * 8} batches" in resumed.stdout, resumed.stdout[-3000:]
    straight = cli.det_command(
        store, "experiment", "create", cli.write_config(context, "straight.yaml", {"epochs": epochs}, slots), context
    )
    assert f"COMPLETED after {epochs * 8} batches" in straight.stdout, straight.stdout[-3000:]
    # Its log lines are in the reference's format: level, process id, logger.
    logs = cli.det_command(store, "trial", "logs", 2).stdout
    assert re.search(r"INFO: \[\d+\] root: training for \d+ epochs", logs), logs[-3000:]

    train = script(context)
    hparams = {"hidden_units": 8, "learning_rate": 0.02, "global_batch_size": 8}
    models = []
    for experiment_id in (1, 2):
        model = train.build_model(hparams)
        model.load_weights(str(cli.latest_checkpoint(store, experiment_id) / "model_checkpoint"))
        models.append(model)
    for paused_weight, straight_weight in zip(models[0].get_weights(), models[1].get_weights()):
        np.testing.assert_array_equal(paused_weight, straight_weight)
    samples, _ = train.make_data(5, seed=2)
    np.testing.assert_array_equal(models[0](samples).numpy(), models[1](samples).numpy())

"""A TFKerasTrial written against the reference's documentation (context.env) runs with only its import changed.

On 1 and 2 processes it pauses and resumes exactly (the same final weights as an
uninterrupted run), and its checkpoint loads the reference's way:
``det.keras.load_model_from_checkpoint_path(path)``, then ``model(samples)``.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import det_estimator as det

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import keras_porting_support as cli  # noqa: E402


@pytest.mark.parametrize("slots", [1, pytest.param(2, marks=[pytest.mark.horovod, pytest.mark.slow])])
@pytest.mark.timeout(900)
def test_a_paused_trial_resumes_to_the_weights_of_an_uninterrupted_one_and_loads_as_the_reference_s(tmp_path, slots):
    context = cli.copy_context(HERE / "keras_trial", tmp_path)
    store = tmp_path / "store.sqlite"
    stopped = cli.pause_after_first_checkpoint(
        store, cli.write_config(context, "long.yaml", {"batches": 1_000_000}, slots), context
    )
    end = stopped + 20
    cli.set_length(store, 1, {"batches": end})
    resumed = cli.det_command(store, "experiment", "resume", 1)
    assert f"COMPLETED after {end} batches" in resumed.stdout, resumed.stdout[-3000:]
    straight = cli.det_command(
        store, "experiment", "create", cli.write_config(context, "straight.yaml", {"batches": end}, slots), context
    )
    assert f"COMPLETED after {end} batches" in straight.stdout, straight.stdout[-3000:]

    paused_model = det.keras.load_model_from_checkpoint_path(cli.latest_checkpoint(store, 1))
    straight_model = det.keras.load_model_from_checkpoint_path(cli.latest_checkpoint(store, 2))
    for paused_weight, straight_weight in zip(paused_model.get_weights(), straight_model.get_weights()):
        np.testing.assert_array_equal(paused_weight, straight_weight)
    assert cli.last_validation(store, 1)["metrics"] == cli.last_validation(store, 2)["metrics"]

    # The reference's documented use of the loaded model: call it on samples.
    spec = importlib.util.spec_from_file_location("porting_model_def", context / "model_def.py")
    model_def = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_def)
    samples, _ = model_def.make_data(5, seed=2)
    np.testing.assert_array_equal(paused_model(samples).numpy(), straight_model(samples).numpy())
    assert paused_model(samples).shape == (5, 1)

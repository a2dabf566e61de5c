"""DeterminedCallback from a checkpoint in the layout written before the one Keras format: continued, warm-started."""

import sys
from pathlib import Path

import numpy as np
import pytest

import det_estimator as det
from det_estimator.keras._engine._keras_compat import KERAS_3

from .linear_script import build_model, dataset
from .test_determined_callback import STEPS_PER_EPOCH, fit, flat, plain_fit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import legacy_keras_checkpoints as legacy  # noqa: E402

# The first layouts were written by det-estimator on Keras 2 only: no Keras 3 checkpoint has them.
pytestmark = pytest.mark.skipif(KERAS_3, reason="checkpoints of the first layouts were written on Keras 2 only")


def legacy_checkpoint(batches: int, continue_id: str, store=legacy.store_callback_v1):
    """A checkpoint (callback v1, or what ``store`` writes) of the linear model after ``batches`` batches of fit."""
    with det.core.init() as core_context:
        model = build_model()
        epochs, batch = divmod(batches, STEPS_PER_EPOCH)
        if epochs:
            model.fit(dataset(0, 1), epochs=epochs, verbose=0)
        if batch:
            model.fit(dataset(0, 1).take(batch), epochs=1, verbose=0)
        uuid = store(
            core_context,
            model,
            epoch=epochs,
            batch=batch,
            steps_completed=batches,
            continue_id=continue_id,
            steps_per_epoch=STEPS_PER_EPOCH,
            epochs=4,
        )
    return model, uuid


@pytest.mark.parametrize("batches", [2 * STEPS_PER_EPOCH, STEPS_PER_EPOCH + 3])  # at an epoch's end, mid-epoch
def test_a_checkpoint_of_the_first_layout_continues_at_its_batch(batches):
    _, uuid = legacy_checkpoint(batches, "same")
    resumed, _, _ = fit(4, checkpoint=uuid, continue_id="same")
    np.testing.assert_allclose(flat(resumed), plain_fit(4), rtol=1e-6, atol=1e-7)


def test_a_checkpoint_of_the_first_layout_warm_starts_another_training():
    first, uuid = legacy_checkpoint(2 * STEPS_PER_EPOCH, "first")
    warm, _, _ = fit(2, checkpoint=uuid, continue_id="second")
    np.testing.assert_allclose(flat(warm), plain_fit(2, start_weights=first.get_weights()), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("batches", [2 * STEPS_PER_EPOCH, STEPS_PER_EPOCH + 3])
def test_a_checkpoint_of_format_2_continues_at_its_batch(batches):
    _, uuid = legacy_checkpoint(batches, "same", store=legacy.store_callback_format_2)
    resumed, _, _ = fit(4, checkpoint=uuid, continue_id="same")
    np.testing.assert_allclose(flat(resumed), plain_fit(4), rtol=1e-6, atol=1e-7)


def test_a_checkpoint_of_format_2_warm_starts_and_loads_as_a_keras_model(tmp_path):
    first, uuid = legacy_checkpoint(2 * STEPS_PER_EPOCH, "first", store=legacy.store_callback_format_2)
    warm, _, _ = fit(2, checkpoint=uuid, continue_id="second")
    np.testing.assert_allclose(flat(warm), plain_fit(2, start_weights=first.get_weights()), rtol=1e-6, atol=1e-7)
    (written,) = (tmp_path / "checkpoints").rglob(uuid)
    loaded = det.keras.load_model_from_checkpoint_path(written)
    np.testing.assert_array_equal(flat(loaded), flat(first))

"""The builders the command checks a trial class for, before launch, are the trial bases' abstract methods."""

import pytest

from det_estimator.cli._entrypoint import TRIAL_BUILDERS


@pytest.mark.parametrize(
    "base", [pytest.param("EstimatorTrial", marks=pytest.mark.estimator), pytest.param("TFKerasTrial")]
)
def test_the_builders_checked_are_the_abstract_methods_of_the_base(base):
    import det_estimator as det

    assert set(TRIAL_BUILDERS) == {"EstimatorTrial", "TFKerasTrial"}
    trial_class = det.estimator.EstimatorTrial if base == "EstimatorTrial" else det.keras.TFKerasTrial
    assert set(TRIAL_BUILDERS[base]) == set(trial_class.__abstractmethods__)

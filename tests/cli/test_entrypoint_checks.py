"""The builders the command checks a trial class for, before launch, are the trial bases' abstract methods."""

import pytest

from det_estimator.cli._entrypoint import TRIAL_BUILDERS


@pytest.mark.parametrize("base", sorted(TRIAL_BUILDERS))
def test_the_builders_checked_are_the_abstract_methods_of_the_base(base):
    import det_estimator as det

    trial_class = det.estimator.EstimatorTrial if base == "EstimatorTrial" else det.keras.TFKerasTrial
    assert set(TRIAL_BUILDERS[base]) == set(trial_class.__abstractmethods__)

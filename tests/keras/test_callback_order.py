"""A TFKerasTrial's callbacks are called in Keras' order: each validation's batches begin and end in pairs."""

import math
from pathlib import Path

import pytest

import det_estimator as det

SUPPORT = Path(__file__).parent.parent / "support"


@pytest.fixture(scope="module")
def order(module_loader):
    return module_loader(SUPPORT / "callback_order.py")


@pytest.mark.parametrize("loader", ["numpy", "sequence", "tfdata"])
def test_each_validation_calls_a_batch_begin_and_end_per_batch_as_plain_evaluate_does(
    analytic_keras, order, tmp_path, loader
):
    checkers = []

    class CheckedTrial(analytic_keras.AnalyticKerasTrial):
        def keras_callbacks(self):
            checkers.append(order.OrderChecker())
            return [*super().keras_callbacks(), checkers[-1]]

    outcome = det.run_trial(CheckedTrial, analytic_keras.make_config(tmp_path, 10, loader))

    assert outcome.state == "COMPLETED"  # the checker raises at on_train_end if the order broke
    (checker,) = checkers
    order.check_order(checker.calls)
    # Plain evaluate() of the 64 validation records in batches of 8: 8 begins, 8 ends.
    batches = math.ceil(analytic_keras.NUM_RECORDS / 8)
    assert checker.calls.count("test_batch_begin") == checker.calls.count("test_batch_end")
    assert order.batches_per_evaluation(checker.calls) == [batches] * len(outcome.validations)

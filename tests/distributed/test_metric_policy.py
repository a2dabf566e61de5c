"""One cross-rank metric policy: the same metrics of one uneven split, through every front door that trains Keras.

Each front door trains :mod:`uneven_split`'s fixed model on 2 processes with
`det-estimator experiment create`; process 0 validates on 70 records, process 1 on the
other 30. Whatever the front door, the validation it records (accuracy, loss, Keras' binned
AUC and the exact ReducerMetric(RocAuc())) is what one process gets on all 100 records.
`benchmarks/metric_policy.py` prints the same comparison as a table.
"""

import sys
from pathlib import Path

import pytest
from sklearn.metrics import roc_auc_score

from det_estimator import launcher
from det_estimator.keras._engine import _keras_compat

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
import uneven_split  # noqa: E402


@pytest.fixture(scope="module")
def whole_set() -> dict[str, float]:
    """The metrics one process gets on the whole validation set (checked against scikit-learn)."""
    values = uneven_split.whole_set()
    x, y = uneven_split.validation_data()
    scores = uneven_split.build_model().predict(x, batch_size=uneven_split.BATCH_SIZE, verbose=0)
    assert values["roc_auc"] == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    # The split is uneven enough that the mean of the shares' values is wrong by far more than any tolerance.
    averaged = uneven_split.mean_of_shares()
    for name in ("loss", "auc", "roc_auc"):
        assert abs(averaged[name] - values[name]) > 0.01
    return values


def _marked(front_door: str):
    if front_door in uneven_split.HOROVOD_FRONT_DOORS:
        return pytest.param(front_door, marks=pytest.mark.horovod)
    if front_door in uneven_split.WITHOUT_HOROVOD_FRONT_DOORS:
        # Where Horovod is installed the trial's worker runs under horovodrun: that is the "TFKerasTrial" door.
        reason = "the trial's worker runs under the TensorFlow launcher only where Horovod is not installed"
        return pytest.param(front_door, marks=pytest.mark.skipif(launcher.horovod_installed(), reason=reason))
    if front_door in uneven_split.TF_KERAS_FRONT_DOORS:
        reason = "tf.keras is Keras 2 here: the front door without tf-keras runs it already"
        return pytest.param(front_door, marks=pytest.mark.skipif(not _keras_compat.KERAS_3, reason=reason))
    return front_door


# A DeterminedCallback or det.keras.init() script under the TensorFlow launcher runs on every stack.
@pytest.mark.parametrize("front_door", [_marked(door) for door in uneven_split.FRONT_DOORS])
def test_every_front_door_reports_the_metrics_of_the_whole_validation_set(front_door, whole_set, tmp_path):
    try:
        reported = uneven_split.run_front_door(front_door, tmp_path)
    except uneven_split.FrontDoorError as error:
        pytest.fail(str(error))

    assert reported == pytest.approx(whole_set, rel=1e-5, abs=1e-7), (
        f"{front_door}: {reported} on 2 processes, {whole_set} on one"
    )

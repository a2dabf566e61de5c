"""ReducerMetric in plain model.evaluate on two real processes: scikit-learn's value on the union of the shares."""

import json

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

# The two-rank pool is one per test process: every module that uses it runs on the same one.
pytestmark = pytest.mark.xdist_group("two_rank_pool")


@pytest.fixture(scope="module")
def worker(load_worker):
    return load_worker("keras_evaluate.py")


def reports(directory, size):
    return [json.loads((directory / f"rank{rank}.json").read_text()) for rank in range(size)]


@pytest.mark.parametrize(("num_processes", "split"), [(1, "uneven"), (2, "uneven"), (2, "all_on_rank0")])
def test_every_rank_gets_scikit_learns_value_over_all_rows(horovod_job, worker, tmp_path, num_processes, split):
    rows = 3001
    job = horovod_job(
        "keras_evaluate.py",
        ["--output-dir", str(tmp_path), "--rows", str(rows), "--split", split],
        num_processes=num_processes,
    )
    assert job.returncode == 0, job.stdout[-5000:]
    x, y = worker.make_data(rows)
    scores = worker.scores(x)
    assert len(np.unique(scores)) < rows / 2, "the scores must have ties"
    expected_auc, expected_ap = roc_auc_score(y, scores), average_precision_score(y, scores)
    shares = reports(tmp_path, num_processes)
    assert sum(report["rows"] for report in shares) == rows
    if num_processes == 2 and split == "uneven":
        assert shares[0]["rows"] != shares[1]["rows"]
    for report in shares:
        assert "error" not in report, report["error"]
        first, second = report["evaluations"]
        assert first == second
        assert first["auc"] == pytest.approx(expected_auc, rel=0, abs=1e-12)
        assert first["average_precision"] == pytest.approx(expected_ap, rel=0, abs=1e-12)
    if num_processes == 2:
        # Keras' own AUC is binned, and each rank's is of its own share only.
        local = [report["evaluations"][0]["keras_auc"] for report in shares if report["rows"]]
        assert all(abs(value - expected_auc) > 1e-6 for value in local)

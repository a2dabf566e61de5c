"""make_metric end to end: a real tf.estimator evaluation on 1 and on 2 processes."""

import json

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

# The two-rank pool is one per test process: every module that uses it runs on the same one.
pytestmark = pytest.mark.xdist_group("two_rank_pool")


@pytest.fixture(scope="module")
def worker(load_worker):
    return load_worker("evaluate_metrics.py")


def read_reports(directory, size):
    return [json.loads((directory / f"rank{rank}.json").read_text()) for rank in range(size)]


def expected_metrics(worker, num_records):
    values, labels, scores = worker.make_data(num_records)
    total = values.sum()
    expected = {
        "sum_fn_tensor": total,
        "sum_fn_list": 3 * total,
        "sum_cls_dict": 3 * total,
        "count": num_records,
        "ordered": float(np.sum(values * np.arange(1, num_records + 1))),
    }
    if len(np.unique(labels)) == 2:
        expected["auc"] = roc_auc_score(labels, scores)
        expected["average_precision"] = average_precision_score(labels, scores)
        # Fewer distinct scores than cells: every cell holds one score, on every rank, so the
        # binned AUC is exact and its bound 0 (ties across ranks are exact ties).
        expected["binned_auc"] = expected["auc"]
        expected["binned_auc_error_bound"] = 0.0
    return expected


@pytest.mark.parametrize(
    ("num_processes", "num_records", "split", "slow_rank"),
    [
        (1, 1001, "round_robin", -1),
        # A slow chief and a slow other rank; the default path keeps the latter.
        pytest.param(2, 1001, "round_robin", 0, marks=pytest.mark.slow),
        (2, 1001, "round_robin", 1),
        (2, 1001, "all_on_rank0", -1),
        (2, 1, "round_robin", -1),
    ],
    ids=["1proc", "2proc-rank0-slow", "2proc-rank1-slow", "2proc-rank1-empty", "2proc-one-example"],
)
def test_every_rank_gets_the_single_process_value_in_both_evaluations(
    horovod_job, worker, tmp_path, num_processes, num_records, split, slow_rank
):
    args = ["--output-dir", str(tmp_path), "--records", str(num_records), "--split", split]
    job = horovod_job("evaluate_metrics.py", [*args, "--slow-rank", str(slow_rank)], num_processes=num_processes)
    assert job.returncode == 0, job.stdout[-5000:]
    expected = expected_metrics(worker, num_records)

    for report in read_reports(tmp_path, num_processes):
        assert "error" not in report, report["error"]
        assert report["size"] == num_processes
        # One process must not need Horovod at all.
        assert report["horovod_loaded"] == (num_processes > 1)
        first, second = report["evaluations"]
        assert first == second, "the second evaluation must start from a fresh state"
        for name, value in expected.items():
            assert first[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name
        if "auc" in expected:
            # With 3 cells per rank the value is approximate; the bound must hold.
            assert abs(first["binned_auc_3_cells"] - expected["auc"]) <= first["binned_auc_3_cells_bound"] + 1e-12
            if num_processes == 1:  # one rank merges its cells without losing any order
                assert first["binned_auc_3_cells_bound"] == 0.0
        if "auc" not in expected:  # a single example: one class only
            assert np.isnan(first["auc"]) and np.isnan(first["binned_auc"]) and np.isnan(first["binned_auc_3_cells"])


def test_an_evaluation_where_no_rank_saw_a_batch_fails_clearly_on_every_rank(horovod_job, tmp_path):
    job = horovod_job("evaluate_metrics.py", ["--output-dir", str(tmp_path), "--records", "0"])
    assert job.returncode == 0, job.stdout[-5000:]
    for report in read_reports(tmp_path, 2):
        assert "no rank evaluated a single batch" in report["error"]


def test_a_reducer_failing_on_one_rank_fails_the_evaluation_on_every_rank(horovod_job, tmp_path):
    job = horovod_job("evaluate_metrics.py", ["--output-dir", str(tmp_path), "--scenario", "failing"])
    assert job.returncode == 0, job.stdout[-5000:]
    for report in read_reports(tmp_path, 2):
        assert "Metric 'broken'" in report["error"]
        assert "FailOnRank failed in accumulate on rank 1" in report["error"]
        assert "RuntimeError: broken reducer on rank 1" in report["error"]

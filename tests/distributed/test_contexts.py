"""DistributedContext and the Estimator wrappers on two real processes."""

import json

import pytest

# The two-rank pool is one per test process: every module that uses it runs on the same one.
pytestmark = pytest.mark.xdist_group("two_rank_pool")


def test_collectives_and_wrappers_on_two_ranks(horovod_job, tmp_path):
    job = horovod_job("contexts.py", ["--output-dir", str(tmp_path)])
    assert job.returncode == 0, job.stdout[-5000:]
    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]

    for rank, report in enumerate(reports):
        assert report["ranks"] == [rank, 2, rank, 2]
        assert report["machines"] == [0, 1]
        assert report["allgather"] == [{"rank": 0}, {"rank": 1}]
        assert report["allgather_local"] == [0, 10]
        assert report["broadcast"] == "chief says 0"
        assert report["broadcast_local"] == [0]
        assert report["unsharded"] == [0, 1, 2]
        assert report["optimizer"] == "_DistributedOptimizer"
        assert report["aggregates_gradients"], "aggregation_frequency=2 must reach Horovod"
    assert reports[0]["gather"] == ["from 0", "from 1"] and reports[1]["gather"] is None
    assert reports[0]["gather_local"] == [0, 1] and reports[1]["gather_local"] is None
    # Round-robin shards: disjoint, and together the whole dataset.
    assert reports[0]["sharded"] == [0, 2, 4, 6] and reports[1]["sharded"] == [1, 3, 5]
    # The cached dataset is built by one process of the machine and sharded the same way.
    assert reports[0]["cached"] == [0, 2, 4, 6] and reports[1]["cached"] == [1, 3, 5]
    assert len(reports[0]["cache_builds"] + reports[1]["cache_builds"]) == 1

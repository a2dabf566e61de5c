"""A Core API script whose ranks each start helper processes, for the process-tree tests.

Each rank starts a subprocess and a multiprocessing pool (as a data-loading pool would be)
and writes their pids, with its own, to ``<data.pids_dir>/rank<N>.json``; then it trains
slowly. ``data.fail_rank`` raises on that rank at its third batch of the first run.
"""

import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import det_estimator as det


def main() -> None:
    settings = det.get_cluster_info().user_data
    with det.core.init() as core_context:
        rank = core_context.distributed.rank
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pool = multiprocessing.get_context("fork").Pool(1)
        pids = {"rank": multiprocessing.current_process().pid, "helpers": [sleeper.pid, *(p.pid for p in pool._pool)]}
        pids_dir = Path(settings["pids_dir"])
        run = len(list(pids_dir.glob(f"rank{rank}-*.json"))) + 1
        first_run = run == 1
        (pids_dir / f"rank{rank}-{run}.json").write_text(json.dumps(pids))
        batches = 0
        for op in core_context.searcher.operations():
            while batches < op.length:
                time.sleep(0.2)
                batches += 1
                if rank == settings.get("fail_rank") and first_run and batches == 3:
                    raise RuntimeError("injected failure")
                if rank == 0:
                    core_context.train.report_training_metrics(batches, {"loss": 1.0 / batches})
                    op.report_progress(batches)
                if core_context.preempt.should_preempt():
                    return
            if rank == 0:
                core_context.train.report_validation_metrics(batches, {"loss": 1.0 / batches})
                op.report_completed(1.0 / batches)


if __name__ == "__main__":
    main()

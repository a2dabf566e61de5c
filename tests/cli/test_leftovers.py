"""experiment list sweeps what killed checkpoint writes left in experiments that no longer run."""

import sys
from pathlib import Path

import sqlalchemy

from det_estimator.store import ExperimentStore, State

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from command_in_process import record_one_experiment, run_command  # noqa: E402


def test_experiment_list_removes_what_killed_checkpoint_writes_left_in_a_constant_number_of_queries(tmp_path):
    path = record_one_experiment(tmp_path)
    storage = tmp_path / "checkpoints"
    statements: list[str] = []

    def count(_connection, _cursor, sql, *_args) -> None:
        statements.append(sql)

    def leave_partial_writes(more: int) -> list[Path]:
        """Adds ``more`` experiments, pauses them all, and leaves a killed write in each of their trials."""
        with ExperimentStore(path) as store:
            config = store.experiment(1).config
            for _ in range(more):
                experiment_id = store.create_experiment("more", config, str(tmp_path), "python3 train.py", 1, False)
                store.create_trial(experiment_id, {}, 0, storage)
            for experiment in store.experiments():
                store.set_state(experiment.id, State.PAUSED)
            trials = store.all_trials()
        left = [Path(trial.checkpoint_dir) / ".partial-0123" for trial in trials]
        for partial in left:
            (partial / "model").mkdir(parents=True)
        return left

    def listed(more: int) -> int:
        left = leave_partial_writes(more)
        statements.clear()
        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", count)
        try:
            status, output = run_command(["--store", str(path), "experiment", "list"])
        finally:
            sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", count)
        assert status == 0, output
        assert not any(partial.exists() for partial in left) and all(partial.parent.is_dir() for partial in left)
        return len(statements)

    # The sweep reads no record of its own: a thousand experiments are listed as fast as a few.
    assert listed(1) == listed(4), statements

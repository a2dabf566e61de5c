"""A linear model trained with NumPy on det_estimator.core: metrics, checkpoints, pause and resume, on N processes."""

from pathlib import Path

import numpy as np
import yaml

import det_estimator as det


def main() -> None:
    config = yaml.safe_load((Path(__file__).parent / "const.yaml").read_text())  # used when run by hand
    with det.core.init(config=config) as core:
        info, rank, size = core.info, core.distributed.rank, core.distributed.size
        learning_rate = info.trial.hparams["learning_rate"]
        x = np.linspace(-1.0, 1.0, 64)
        y = 3.0 * x + 0.5
        x, y = x[rank::size], y[rank::size]  # each process trains on its share of the data
        weights, batches = np.zeros(2), 0
        if info.latest_checkpoint:  # a resumed trial continues where it stopped
            with core.checkpoint.restore_path(info.latest_checkpoint) as path:
                saved = np.load(path / "state.npz")
                # The loss too: a run paused at the end of an operation validates without training.
                weights, batches, loss = saved["weights"], int(saved["batches"]), float(saved["loss"])
        for op in core.searcher.operations():
            while batches < op.length:
                error = weights[0] * x + weights[1] - y
                shares = core.distributed.allgather((2 * np.array([error @ x, error.sum()]), len(x), error @ error))
                weights = weights - learning_rate * sum(g for g, _, _ in shares) / sum(n for _, n, _ in shares)
                loss = sum(e for _, _, e in shares) / sum(n for _, n, _ in shares)
                batches += 1
                if batches % 50 == 0 or batches == op.length:
                    core.train.report_training_metrics(batches, {"loss": loss})
                    if rank == 0:
                        with core.checkpoint.store_path({"steps_completed": batches}) as (path, _):
                            np.savez(path / "state.npz", weights=weights, batches=batches, loss=loss)
                    if core.preempt.should_preempt():
                        return  # checkpointed: `det-estimator experiment resume` continues from here
            core.train.report_validation_metrics(batches, {"loss": loss, "slope": weights[0]})
            if rank == 0:
                op.report_completed(loss)


if __name__ == "__main__":
    main()

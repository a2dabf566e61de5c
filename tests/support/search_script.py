"""A training script on the Core API whose validation metric is a known function of its hyperparameters and length.

``loss = (x - 0.3) ** 2 + 1 / batches``: the best ``x`` is 0.3, and every trial improves
with length. It checkpoints its position every ``checkpoint_every`` batches, sleeps
``seconds_per_batch`` per batch (so that a test can pause it), raises for ``x`` above
``fail_above``, raises InvalidHP for ``x`` below ``invalid_below``, reports
``metric_name`` (``loss`` by default), with ``fail_when_done`` raises after its
training is complete, and with ``skip_training`` exits at once without training.
"""

import json
import time

import det_estimator as det


def loss(x: float, batches: int) -> float:
    """The metric the search minimises."""
    return (x - 0.3) ** 2 + 1.0 / batches


def main() -> None:
    with det.core.init() as core:
        hparams = core.info.trial.hparams
        if hparams.get("skip_training"):
            return
        x = hparams["x"]
        if x > hparams.get("fail_above", 10.0):
            raise ValueError(f"x={x} is above fail_above")
        if x < hparams.get("invalid_below", -10.0):
            raise det.InvalidHP(f"x={x} is below invalid_below")
        batches = 0
        if core.info.latest_checkpoint:
            with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
                batches = json.loads((path / "state.json").read_text())["batches"]
        every = hparams.get("checkpoint_every", 5)
        for op in core.searcher.operations():
            while batches < op.length:
                time.sleep(hparams.get("seconds_per_batch", 0.0))
                batches += 1
                if batches % every == 0 or batches == op.length:
                    core.train.report_training_metrics(batches, {"loss": loss(x, batches)})
                    with core.checkpoint.store_path({"steps_completed": batches}) as (path, _):
                        (path / "state.json").write_text(json.dumps({"batches": batches}))
                    if core.preempt.should_preempt():
                        return
            value = loss(x, batches)
            core.train.report_validation_metrics(batches, {hparams.get("metric_name", "loss"): value})
            op.report_completed(value)
        if hparams.get("fail_when_done"):
            raise RuntimeError("failed after reporting the training complete")


if __name__ == "__main__":
    main()

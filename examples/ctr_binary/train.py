"""Runs the click-through-rate experiment and prints where its model went.

Usage (from the repository root)::

    .venv/bin/python examples/ctr_binary/train.py                      # 1 process
    .venv/bin/python examples/ctr_binary/train.py --config examples/ctr_binary/distributed.yaml
    .venv/bin/python examples/ctr_binary/train.py --test               # one batch, to check a change

Each run is a new trial named with the time; ``--trial-id NAME`` resumes a paused one
(Ctrl-C pauses: the current batch finishes and a checkpoint is written).
"""

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from model_def import ClickThroughRateTrial  # noqa: E402

import det_estimator as det  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(HERE / "const.yaml"), help="experiment config (YAML)")
    parser.add_argument("--test", action="store_true", help="one training batch, one validation step, one checkpoint")
    parser.add_argument("--trial-id", default=None, help="resume this trial instead of starting a new one")
    args = parser.parse_args()

    trial_id = args.trial_id or time.strftime("ctr-binary-%Y%m%d-%H%M%S")
    outcome = det.run_trial(ClickThroughRateTrial, args.config, test=args.test, trial_id=trial_id)

    print(f"\ntrial {trial_id}: {outcome.state} after {outcome.batches_trained} batches")
    if outcome.validations:
        best = max(outcome.validations, key=lambda v: v["metrics"]["auc"])
        metrics = best["metrics"]
        print(
            f"best validation (after {best['batches']} batches): ROC AUC {metrics['auc']:.6f}, "
            f"average precision {metrics['average_precision']:.6f}, log loss {metrics['log_loss']:.6f}"
        )
    for checkpoint in outcome.checkpoints:
        print(f"checkpoint after {checkpoint['batches']} batches: {checkpoint['path']}")
        print(f"  SavedModel: {Path(checkpoint['path']) / 'raw'}")
    if outcome.checkpoints:
        print(f"\nscore new rows with: .venv/bin/python {HERE / 'score.py'} {outcome.checkpoints[-1]['path']}")


if __name__ == "__main__":
    main()

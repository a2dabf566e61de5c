"""Batch inference with the new Keras API: a trained trial's model predicts every digit, on N processes.

Run as a job: ``det-estimator job run batch_inference.yaml .``. The job config's ``data``
names the trial, the batch size and where the predictions go.
"""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

import det_estimator as det


def main() -> None:
    context = det.keras.init()
    settings = context.config_data

    # The model of the trial's best checkpoint (its last without best=True), rebuilt from the checkpoint alone.
    model = context.load_checkpoint_model(trial_id=settings["trial_id"], best=True)

    x = (load_digits().data / 16.0).astype("float32")
    # Each process predicts its share; predict() gathers them back in the input's order.
    x = context.wrap_data(x)
    probabilities = context.predict(model, x, batch_size=settings["batch_size"], verbose=0)

    if context.distributed.rank == 0:
        output = Path(settings["output"])
        output.parent.mkdir(parents=True, exist_ok=True)
        np.save(output, probabilities)
        print(f"wrote {len(probabilities)} predictions to {output}")


if __name__ == "__main__":
    main()

"""A premade DNNClassifier on scikit-learn's digits, with exact distributed macro F1.

The 1,797 8x8 images of handwritten digits ship with scikit-learn, so nothing is
downloaded. The premade estimator is ported unchanged: its optimizer goes through
``context.wrap_optimizer`` and its datasets through ``context.wrap_dataset``; macro F1
and accuracy are added with ``tf.estimator.add_metrics`` and det-estimator's
reducers, which sum confusion matrices over all workers, so they are exact.
"""

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import det_estimator as det
from det_estimator.reducers import F1, Accuracy

NUM_CLASSES = 10


def digits_split(validation_fraction: float):
    """(train_features, train_labels), (validation_features, validation_labels), pixels scaled to [0, 1]."""
    digits = load_digits()
    features = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    x_train, x_val, y_train, y_val = train_test_split(
        features, labels, test_size=validation_fraction, random_state=0, stratify=labels
    )
    return (x_train, y_train), (x_val, y_val)


class DigitsTrial(det.EstimatorTrial):
    """tf.compat.v1.estimator.DNNClassifier, as a team would have it already."""

    def __init__(self, context: det.EstimatorTrialContext):
        super().__init__(context)
        fraction = context.get_experiment_config()["data"]["validation_fraction"]
        self.train_rows, self.validation_rows = digits_split(fraction)

    def build_estimator(self) -> tf.estimator.Estimator:
        optimizer = self.context.wrap_optimizer(
            tf.compat.v1.train.AdamOptimizer(self.context.get_hparam("learning_rate"))
        )
        classifier = tf.compat.v1.estimator.DNNClassifier(
            hidden_units=self.context.get_hparam("hidden_units"),
            feature_columns=[tf.feature_column.numeric_column("pixels", shape=(64,))],
            n_classes=NUM_CLASSES,
            optimizer=optimizer,
            dropout=self.context.get_hparam("dropout"),
        )
        make_metric = self.context.experimental.make_metric

        def exact_metrics(labels, predictions):
            scored = {"labels": labels, "predictions": predictions["class_ids"]}
            return {
                "macro_f1": make_metric(scored, F1(num_classes=NUM_CLASSES, average="macro"), np.float64),
                "exact_accuracy": make_metric(scored, Accuracy(num_classes=NUM_CLASSES), np.float64),
            }

        return tf.estimator.add_metrics(classifier, exact_metrics)

    def _input_fn(self, rows, shuffle: bool):
        features, labels = rows

        def input_fn():
            dataset = tf.data.Dataset.from_tensor_slices(({"pixels": features}, labels))
            dataset = self.context.wrap_dataset(dataset)
            if shuffle:
                dataset = dataset.shuffle(len(labels)).repeat()
            return dataset.batch(self.context.get_per_slot_batch_size())

        return input_fn

    def build_train_spec(self) -> tf.estimator.TrainSpec:
        return tf.estimator.TrainSpec(self._input_fn(self.train_rows, shuffle=True))

    def build_validation_spec(self) -> tf.estimator.EvalSpec:
        return tf.estimator.EvalSpec(self._input_fn(self.validation_rows, shuffle=False), steps=None)

    def build_serving_input_receiver_fns(self):
        def pixels():
            x = tf.compat.v1.placeholder(tf.float32, [None, 64], name="pixels")
            return tf.estimator.export.ServingInputReceiver({"pixels": x}, {"pixels": x})

        return {"pixels": pixels}

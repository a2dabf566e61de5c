"""RunHook: a SessionRunHook that also hears about the trial's checkpoints and its end."""

import tensorflow as tf


class RunHook(tf.estimator.SessionRunHook):
    """A ``tf.estimator.SessionRunHook`` with callbacks for the trial's lifecycle.

    Pass it in ``TrainSpec.hooks`` like any SessionRunHook; the usual ``begin``,
    ``before_run``, ``after_run`` and ``end`` keep working, and the harness also calls:

    - :meth:`on_checkpoint_load` on every rank, when the trial resumes from a
      checkpoint, before training continues;
    - :meth:`on_checkpoint_end` on the chief (rank 0) only, after the model files of a
      checkpoint are written and before the checkpoint is sealed, so that files
      written into ``checkpoint_dir`` become part of it;
    - :meth:`on_trial_close` on every rank when the trial ends, on success and on
      failure.

    Example:
        A hook that stores a vocabulary with every checkpoint and reads it back::

            class VocabularyHook(det.RunHook):
                def __init__(self, vocabulary):
                    self.vocabulary = vocabulary

                def on_checkpoint_end(self, checkpoint_dir):
                    with open(os.path.join(checkpoint_dir, "vocabulary.json"), "w") as f:
                        json.dump(self.vocabulary, f)

                def on_checkpoint_load(self, checkpoint_dir):
                    with open(os.path.join(checkpoint_dir, "vocabulary.json")) as f:
                        self.vocabulary = json.load(f)
    """

    def on_checkpoint_load(self, checkpoint_dir: str) -> None:
        """Called on every rank with the checkpoint the trial resumes from.

        Args:
            checkpoint_dir: the checkpoint's directory, as sealed.
        """

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Called on the chief after each checkpoint's model files are written, before it is sealed.

        Args:
            checkpoint_dir: the directory of the checkpoint being written: write files
                here to make them part of it. It is a temporary name, valid only during
                this call: once every hook has returned, the checkpoint is sealed (hashed)
                and renamed to ``<trial checkpoint directory>/<uuid>``, where
                ``det-estimator checkpoint list`` shows it and :meth:`on_checkpoint_load`
                reads it back. Keep no reference to this path.
        """

    def on_trial_close(self) -> None:
        """Called on every rank when the trial ends, whether it succeeded or failed."""

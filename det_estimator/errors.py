"""The base class of det-estimator's own errors, and the errors users raise on purpose.

Every error det-estimator raises for a reason of its own (an invalid config, a store
it cannot use, a trial used in a way the harness cannot run) is a
:class:`DetEstimatorError`, so that one ``except det.DetEstimatorError`` catches them
all. Most also derive from the built-in class that describes them (``ValueError`` for
a bad config, ``RuntimeError`` for misuse of a lifecycle), so code that catches those
keeps working.

This module imports nothing of det-estimator: every layer may use it.
"""


class DetEstimatorError(Exception):
    """An error raised by det-estimator itself; its message says what was wrong and what is expected."""


class PermanentTrialError(DetEstimatorError):
    """A trial's code or config asks for what cannot work, as det-estimator can tell when it runs.

    A restart would run the same code and config and fail the same way, so a trial that
    raises one is not restarted: its run records ``permanent`` (see ``_root_cause``).
    """

    permanent = True


class TrialLifecycleError(PermanentTrialError, RuntimeError):
    """The trial was built or used in a way the harness cannot run.

    Raised by the controllers of both trial types (``EstimatorTrial``, ``TFKerasTrial``).
    """


class TrialDefinitionError(PermanentTrialError, TypeError, ValueError):
    """A trial's builder returned what the harness cannot run: a wrong type, a setting it would ignore.

    Both a ``TypeError`` and a ``ValueError``, as the checks that raise it raised one or
    the other before, so that code catching those keeps working.
    """


class InvalidHP(DetEstimatorError):  # noqa: N818 -- the reference system's name
    """Raised by a trial whose hyperparameters cannot work (an impossible combination, say).

    The trial ends without counting as failed: a random or TPE search replaces it with
    another trial, and no traceback is shown.
    """


class UndefinedHyperparameterError(PermanentTrialError, KeyError):
    """A trial asked for a hyperparameter that its experiment config does not define."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # the message, not KeyError's quoted repr of it


class TrialHyperparameters(dict):
    """A trial's hyperparameters: a dict in which a missing name raises :class:`UndefinedHyperparameterError`.

    The error names the hyperparameters the config defines, where a plain dict's
    ``KeyError`` would give the missing name alone.
    """

    def __missing__(self, name: str):
        defined = ", ".join(sorted(map(str, self)))
        raise UndefinedHyperparameterError(
            f"Hyperparameter {name!r} is not defined in the experiment config; "
            f"the defined hyperparameters are: {defined}"
        )


class EstimatorUnavailableError(DetEstimatorError, ImportError):
    """The tf.estimator half of det-estimator was imported where TensorFlow has no tf.estimator (2.16 and later).

    An ``ImportError`` too, as a missing module is: code that tries the import and falls
    back keeps working.
    """

"""The store's errors: a store that cannot be used, an id it does not have, an experiment already running.

Every module of the store imports its errors from here; this module imports nothing of
the store.
"""

from det_estimator.errors import DetEstimatorError


class StoreError(DetEstimatorError, RuntimeError):
    """The store cannot be used: unreadable, or of a schema this version does not know."""


class UnknownIdError(StoreError, LookupError):
    """No experiment, trial or checkpoint has the id given."""


class StoreUnusableError(StoreError):
    """The store file cannot be opened, read or written (corrupt, read-only, of a newer schema, not a file)."""


class StoreUpgradeNeededError(StoreUnusableError):
    """The store has an older schema, which ``det-estimator store upgrade`` upgrades; it is not used until then."""


class StoreUnavailableError(StoreUnusableError):
    """The store's database server, reached before, stopped answering and did not answer again in time."""


class NoStoreError(StoreUnusableError):
    """A command that reads a store was given a database that holds none (a store is made only by creating)."""


class StoreFullError(StoreError):
    """The store could not be written: its file system (or its quota) is full."""


class StoreLockedError(StoreError):
    """The store could not be written: another process held its write lock for longer than a write waits."""


class ExperimentBusyError(StoreError):
    """Another live process already runs the experiment."""

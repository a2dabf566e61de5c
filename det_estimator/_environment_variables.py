"""The ``DET_*`` environment variables: each one det-estimator sets or reads, named once here.

The launchers hand settings to the processes they start through these variables, and
the processes read them back (see ``launcher/``, ``launch/``, ``orchestration/`` and
``core/``). This module imports nothing, so that every layer may use it, the launcher
and the command included.
"""

# The experiment store's database file (else ``$XDG_DATA_HOME/det-estimator/store.sqlite``);
# set by the user, read by the command and by every process that opens the default store.
STORE = "DET_ESTIMATOR_STORE"

# The folder of a new PostgreSQL store's own files (trial logs, TensorBoard event files),
# recorded in the store when it is made (else one per database under $XDG_DATA_HOME/det-estimator).
STORE_FILES = "DET_ESTIMATOR_STORE_FILES"

# The token `det-estimator ui` requires on a non-loopback address, given through the
# environment rather than the command line, which other users can read in the process list.
UI_TOKEN = "DET_ESTIMATOR_UI_TOKEN"

# The path of the run's ClusterInfo (JSON), set for every process an experiment or a job starts.
CLUSTER_INFO = "DET_CLUSTER_INFO"

# Where the chief of det-estimator's object collectives listens (core.DistributedContext).
CHIEF_IP = "DET_CHIEF_IP"
CHIEF_PORT = "DET_CHIEF_PORT"

# Seconds the chief and the workers wait for each other to connect (300 by default).
RENDEZVOUS_TIMEOUT = "DET_RENDEZVOUS_TIMEOUT"

# Where a process of the TensorFlow launcher runs, beside its TF_CONFIG: its rank and the
# job's size, its rank and the process count on its machine, its machine's index and the
# machine count.
RANK = "DET_RANK"
SIZE = "DET_SIZE"
LOCAL_RANK = "DET_LOCAL_RANK"
LOCAL_SIZE = "DET_LOCAL_SIZE"
CROSS_RANK = "DET_CROSS_RANK"
CROSS_SIZE = "DET_CROSS_SIZE"

"""ClusterInfo: what a process launched for an experiment knows about its task.

The orchestration layer writes one JSON file per trial run and names it in the
``DET_CLUSTER_INFO`` environment variable of every process it starts; each process
reads it here, once. This module imports no TensorFlow, so the launcher, the command
and plain scripts can use it.
"""

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from det_estimator import _environment_variables as environment_variables
from det_estimator.errors import TrialHyperparameters

# The variable that names a launched process's info file (kept under this name for callers of _info).
INFO_VARIABLE = environment_variables.CLUSTER_INFO

TRIAL_TASK = "TRIAL"


@dataclass(frozen=True)
class TrialClassSpec:
    """How a worker process imports the trial class: its module, name and source file.

    Attributes:
        module: the class's module name (``__main__`` for a class defined in a script).
        qualname: the class's qualified name in that module.
        file: the module's source file, if it has one.
        sys_path: directories put first on ``sys.path`` before importing.
    """

    module: str
    qualname: str
    file: Optional[str] = None
    sys_path: tuple[str, ...] = ()

    @classmethod
    def of(cls, trial_class: type) -> "TrialClassSpec":
        """Describes ``trial_class`` so that another process can import it."""
        module = sys.modules.get(trial_class.__module__)
        source = getattr(module, "__file__", None)
        source = os.path.abspath(source) if source else None
        directories = [os.getcwd()] + ([os.path.dirname(source)] if source else [])
        return cls(trial_class.__module__, trial_class.__qualname__, source, tuple(directories))

    def load(self) -> type:
        """Imports the class in this process.

        A class defined in a launching script (``__main__``) is loaded from its file
        under another module name, so that the script's ``if __name__ == "__main__":``
        block does not run again.
        """
        import importlib
        import importlib.util

        for entry in reversed(self.sys_path):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        if self.module == "__main__" and self.file:
            spec = importlib.util.spec_from_file_location("det_estimator_trial_module", self.file)
            if spec is None or spec.loader is None:
                raise ImportError(f"Cannot load the trial class's module from {self.file}: it is not a Python file.")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(self.module)
        target: Any = module
        for part in self.qualname.split("."):
            target = getattr(target, part)
        return target


@dataclass(frozen=True)
class TrialInfo:
    """The trial a process works for.

    Attributes:
        trial_id: the trial's id in the experiment store.
        experiment_id: its experiment's id.
        trial_seed: the seed Python, NumPy and TensorFlow are seeded from.
        hparams: its hyperparameter values.
        config: the experiment config, defaults filled in (``ExperimentConfig.to_dict()``).
        run_id: which run of the trial this is (1 for the first; a resume or a restart
            is a new run).
    """

    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    run_id: int = 1

    def __post_init__(self) -> None:
        # A script reads ``info.trial.hparams[name]`` itself: a name the config lacks is then
        # the same error naming the defined ones, ending the trial at once, as the harnesses'
        # ``get_hparam``, rather than a bare KeyError restarted max_restarts times.
        if not isinstance(self.hparams, TrialHyperparameters):
            object.__setattr__(self, "hparams", TrialHyperparameters(self.hparams))


@dataclass(frozen=True)
class ClusterInfo:
    """What a launched process knows about its task; see :func:`get_cluster_info`.

    Attributes:
        task_type: ``"TRIAL"``, or ``"BATCH_INFERENCE"`` in a job's processes
            (``det-estimator job run``).
        trial: the trial this process trains; None in a job.
        latest_checkpoint: the uuid of the checkpoint to resume from, or None for a new
            trial.
        user_data: the config's ``data`` section.
        store_path: the experiment store's database file.
        checkpoint_dir: the trial's checkpoint directory (shared by every process).
        test_mode: one batch, one validation step and one checkpoint.
        pause_file: created by the launcher to ask the trial to checkpoint and stop.
        trial_class: the trial class a det-estimator worker runs; None for a script.
        slots: how many processes run the trial.
        container_addrs: the machines they run on (``("localhost",)`` on one machine).
        search_driven: the trial's operations come from the experiment's search through
            the store (a launched trial); otherwise one operation of ``max_length``.
        launcher: the process that launched the run, ``(pid, host, start time)`` as the
            store records it; None for a run in the caller's own process.
    """

    task_type: str
    trial: Optional[TrialInfo]
    latest_checkpoint: Optional[str]
    user_data: dict[str, Any]
    store_path: str
    checkpoint_dir: str
    test_mode: bool = False
    pause_file: Optional[str] = None
    trial_class: Optional[TrialClassSpec] = None
    slots: int = 1
    container_addrs: tuple[str, ...] = field(default=("localhost",))
    search_driven: bool = False
    launcher: Optional[tuple[int, str, Optional[int]]] = None

    def require_trial(self) -> TrialInfo:
        """The trial this process works for.

        Raises:
            RuntimeError: the process works for no trial (a job's process).
        """
        if self.trial is None:
            raise RuntimeError(f"This process runs a {self.task_type} task, not a trial: its cluster info has none.")
        return self.trial

    @property
    def container_rank(self) -> int:
        """The index of this process's machine among ``container_addrs`` (from Horovod's or TF's launch)."""
        for variable in ("HOROVOD_CROSS_RANK", environment_variables.CROSS_RANK):
            if variable in os.environ:
                return int(os.environ[variable])
        return 0

    def to_json(self) -> str:
        """The info as JSON, for :func:`read_cluster_info` in another process."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "ClusterInfo":
        """The inverse of :meth:`to_json`."""
        raw = json.loads(text)
        trial = TrialInfo(**raw.pop("trial")) if raw.get("trial") else None
        spec = raw.pop("trial_class", None)
        trial_class = None if spec is None else TrialClassSpec(**{**spec, "sys_path": tuple(spec["sys_path"])})
        addrs = tuple(raw.pop("container_addrs", ("localhost",)))
        launcher = raw.pop("launcher", None)
        raw.pop("trial", None)
        return cls(
            trial=trial,
            trial_class=trial_class,
            container_addrs=addrs,
            launcher=None if launcher is None else tuple(launcher),
            **raw,
        )

    def write(self, path: Path) -> None:
        """Writes the info to ``path`` (for the ``DET_CLUSTER_INFO`` variable of launched processes).

        Readable by this user alone: the store it names may be a database URL with its password.
        """
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(self.to_json())


# The info of a trial run in this very process (run_trial on one slot, det.init(local=True)).
_in_process: Optional[ClusterInfo] = None


def get_cluster_info() -> Optional[ClusterInfo]:
    """The task this process runs for, or None outside an experiment.

    A process started for an experiment (by ``det-estimator experiment create``,
    ``experiment resume``, ``run_trial`` or ``det.init()``) has it; a plain
    ``python train.py`` has none, except while the run that ``det.core.init()``
    records for it lasts (on each of its processes).

    Returns:
        A :class:`ClusterInfo` with ``task_type``, ``latest_checkpoint``, ``trial``
        (``trial_id``, ``experiment_id``, ``hparams``, ``trial_seed``) and
        ``user_data`` (the config's ``data``), or None.
    """
    if _in_process is not None:
        return _in_process
    path = os.environ.get(INFO_VARIABLE)
    if not path:
        return None
    return ClusterInfo.from_json(Path(path).read_text(encoding="utf-8"))


def run_directory() -> Optional[Path]:
    """The launched run's own folder (its launcher's, holding the info file), or None outside a launched run."""
    path = os.environ.get(INFO_VARIABLE)
    return Path(path).parent if path and _in_process is None else None


def set_in_process(info: Optional[ClusterInfo]) -> None:
    """Makes :func:`get_cluster_info` return ``info`` while a trial runs in this process."""
    global _in_process
    _in_process = info

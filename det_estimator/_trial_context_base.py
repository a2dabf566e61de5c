"""What every trial context tells a trial about itself: hyperparameters, batch sizes, seed, config and ids."""

import copy
from dataclasses import dataclass
from typing import Any

from det_estimator.config import ExperimentConfig
from det_estimator.errors import TrialHyperparameters


@dataclass(frozen=True)
class EnvContext:
    """What the reference system's ``context.env`` tells a trial, read from its context (``det.EnvContext``).

    Attributes:
        experiment_config: the experiment config with its defaults filled in.
        hparams: this trial's hyperparameters.
        trial_seed: the seed of this trial.
        det_trial_id: the trial's id in the experiment store, as a string (as the reference has it).
        det_experiment_id: its experiment's id, as a string.
        global_batch_size: records per batch over all processes.
        per_slot_batch_size: records per batch on each process.
        on_cluster: always False: there is no cluster (see "Porting a model").
        managed_training: always True: the harness drives training.
    """

    experiment_config: dict[str, Any]
    hparams: dict[str, Any]
    trial_seed: int
    det_trial_id: str
    det_experiment_id: str
    global_batch_size: int
    per_slot_batch_size: int
    on_cluster: bool = False
    managed_training: bool = True


class TrialContextBase:
    """The part of ``EstimatorTrialContext`` and ``TFKerasTrialContext`` that describes the trial.

    Args:
        config: the validated experiment config.
        hparams: this trial's hyperparameter values (sampled from the config).
        trial_seed: the seed of this trial.
        trial_id: the trial's id in the experiment store.
        experiment_id: its experiment's id.
    """

    def __init__(
        self, config: ExperimentConfig, hparams: dict[str, Any], trial_seed: int, trial_id: int, experiment_id: int
    ) -> None:
        self._config = config
        self._hparams = TrialHyperparameters(copy.deepcopy(hparams))
        self._trial_seed = trial_seed
        self._global_batch_size = hparams["global_batch_size"]
        self._per_slot_batch_size = config.per_slot_batch_size(self._global_batch_size)
        self._trial_id = trial_id
        self._experiment_id = experiment_id

    def get_hparam(self, name: str) -> Any:
        """The value of one hyperparameter (a dict for a nested group).

        Raises:
            UndefinedHyperparameterError: (a ``KeyError``) the experiment config defines
                no hyperparameter ``name``.
        """
        return copy.deepcopy(self._hparams[name])

    def get_hparams(self) -> dict[str, Any]:
        """All of this trial's hyperparameters, as a new dict."""
        return copy.deepcopy(self._hparams)

    def get_global_batch_size(self) -> int:
        """The ``global_batch_size`` hyperparameter: records per batch over all processes."""
        return self._global_batch_size

    def get_per_slot_batch_size(self) -> int:
        """Records per batch on each process: the global batch size // number of slots."""
        return self._per_slot_batch_size

    def get_experiment_config(self) -> dict[str, Any]:
        """The experiment config with its defaults filled in, as a new dict."""
        return self._config.to_dict()

    def get_data_config(self) -> dict[str, Any]:
        """The config's ``data`` section, as a new dict."""
        return self._config.data_dict()

    def get_trial_seed(self) -> int:
        """The seed of this trial, from which Python, NumPy, TensorFlow (and Keras) are seeded."""
        return self._trial_seed

    def get_trial_id(self) -> int:
        """This trial's id in the experiment store."""
        return self._trial_id

    def get_experiment_id(self) -> int:
        """The id of this trial's experiment in the experiment store."""
        return self._experiment_id

    @property
    def env(self) -> EnvContext:
        """The reference system's view of the trial's environment: config, hyperparameters, seed, ids (new copies)."""
        return EnvContext(
            experiment_config=self.get_experiment_config(),
            hparams=self.get_hparams(),
            trial_seed=self._trial_seed,
            det_trial_id=str(self._trial_id),
            det_experiment_id=str(self._experiment_id),
            global_batch_size=self._global_batch_size,
            per_slot_batch_size=self._per_slot_batch_size,
        )


# The reference system's name for the base of every trial context (``det.TrialContext``),
# which trials use in type hints and isinstance checks.
TrialContext = TrialContextBase

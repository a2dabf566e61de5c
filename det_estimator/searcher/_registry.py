"""``make_search_method``: the search method of a config's ``searcher.name``."""

from det_estimator.config import ExperimentConfig
from det_estimator.searcher._asha import AdaptiveASHASearch
from det_estimator.searcher._base import SearchMethod
from det_estimator.searcher._grid import GridSearch
from det_estimator.searcher._random import RandomSearch
from det_estimator.searcher._single import SingleSearch
from det_estimator.searcher._tpe import TPESearch

# searcher.name -> the class that runs it.
SEARCH_METHODS: dict[str, type[SearchMethod]] = {
    cls.name: cls for cls in (SingleSearch, RandomSearch, GridSearch, AdaptiveASHASearch, TPESearch)
}


def make_search_method(config: ExperimentConfig) -> SearchMethod:
    """Builds the search method that ``config.searcher.name`` names, in its initial state.

    To resume a search, build it the same way and call ``load_state_dict`` with
    the state saved last.

    Example::

        method = make_search_method(load_experiment_config("asha.yaml"))
        ops = method.initial_operations()

    Args:
        config: The experiment config.

    Returns:
        A new search method.

    Raises:
        ConfigError: If the config cannot be searched as it is (a grid search
            over a hyperparameter without ``count``).
        ValueError: If no search method implements the searcher.
    """
    cls = SEARCH_METHODS.get(config.searcher.name)
    if cls is None:
        raise ValueError(
            f"searcher.name must be one of: {', '.join(sorted(SEARCH_METHODS))}. Received: {config.searcher.name!r}"
        )
    return cls(config)

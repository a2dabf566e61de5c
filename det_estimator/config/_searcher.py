"""The ``searcher`` section: which search runs, and the keys each searcher takes.

Every searcher takes ``name``, ``metric``, ``smaller_is_better`` and
``max_length`` (or the reference's ``time_metric`` with ``max_time``, read as the
``max_length`` they mean); the others are per searcher (see ``_SEARCHER_KEYS``). A key that
another searcher takes is rejected with a message naming the searcher; a key no
searcher takes is an unknown key. The arithmetic of ``adaptive_asha``'s brackets
and rungs lives here too, because validating ``bracket_rungs`` and ``max_trials``
needs it.
"""

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional, TypeVar, Union

from det_estimator.config._errors import PREFIX, ConfigError, describe, invalid_value, missing_key
from det_estimator.config._fields import (
    INT64_MAX,
    MAPPING_RULE,
    check_int,
    check_keys,
    join,
    lookup,
    read_bool,
    read_choice,
    read_int,
    read_str,
)
from det_estimator.config._lengths import Length, LengthUnit, parse_length

SINGLE = "single"
RANDOM = "random"
GRID = "grid"
ADAPTIVE_ASHA = "adaptive_asha"
TPE = "tpe"
SEARCHER_NAMES = (ADAPTIVE_ASHA, GRID, RANDOM, SINGLE, TPE)
# Searchers of the reference format that det-estimator does not implement.
_NOT_SUPPORTED_SEARCHERS = ("adaptive", "adaptive_simple", "async_halving", "custom", "pbt", "sync_halving")

ASHA_MODES = ("aggressive", "conservative", "standard")
DEFAULT_MAX_CONCURRENT_TRIALS = 16

_COMMON_KEYS = ("name", "metric", "smaller_is_better", "max_length")
_ASHA_KEYS = ("max_trials", "max_concurrent_trials", "mode", "divisor", "max_rungs", "bracket_rungs", "stop_once")
# The keys each searcher takes besides the common ones.
_SEARCHER_KEYS: dict[str, tuple[str, ...]] = {
    SINGLE: (),
    RANDOM: ("max_trials", "max_concurrent_trials"),
    GRID: ("max_concurrent_trials",),
    ADAPTIVE_ASHA: _ASHA_KEYS,
    TPE: ("max_trials", "max_concurrent_trials"),
}
# Why a searcher has no use for a key that others take, where "only X takes it" would not say enough.
_WHY_NOT = {
    SINGLE: ", which runs exactly one trial",
    GRID: ", which runs one trial per point of the grid",
}
_BRACKET_RUNGS_RULE = "a non-empty list of positive integers"


@dataclass(frozen=True)
class AshaBracket:
    """One bracket of an ``adaptive_asha`` search.

    Attributes:
        num_rungs: Number of rungs.
        max_trials: Trials the bracket creates.
        max_concurrent_trials: Trials it runs at once; 0 for no limit.
        rung_lengths: Training length of each rung, in the unit of
            ``searcher.max_length``, increasing; the last is ``max_length``.
    """

    num_rungs: int
    max_trials: int
    max_concurrent_trials: int
    rung_lengths: tuple[int, ...]


@dataclass(frozen=True)
class SearcherConfig:
    """The validated ``searcher`` section.

    Keys a searcher does not take are None.

    Attributes:
        name: The searcher: "single", "random", "grid", "adaptive_asha" or "tpe".
        metric: Name of the validation metric that ranks trials and checkpoints.
        smaller_is_better: Whether a smaller ``metric`` is better.
        max_length: How long each trial trains at most. Without ``max_length`` in the
            config (``length_from_script``) it is the longest length there is: the
            script decides how long it trains.
        max_trials: Trials to create (random, adaptive_asha, tpe).
        max_concurrent_trials: Trials to run at once, 0 for no limit (all but single).
        mode: "aggressive", "standard" or "conservative" (adaptive_asha without
            ``bracket_rungs``).
        divisor: Factor between the lengths of successive rungs, and the
            fraction of a rung's trials that go on (adaptive_asha).
        max_rungs: Most rungs a bracket has (adaptive_asha without ``bracket_rungs``).
        bracket_rungs: Rungs of each bracket, replacing ``mode`` and ``max_rungs``
            (adaptive_asha, optional).
        stop_once: True for stopping-based ASHA, False for promotion-based (adaptive_asha).
        length_from_script: the config gives no length (the reference's last release lets a
            script decide its own): only a script with the ``single`` searcher may.
    """

    name: str
    metric: str
    smaller_is_better: bool
    max_length: Length
    max_trials: Optional[int] = None
    max_concurrent_trials: Optional[int] = None
    mode: Optional[str] = None
    divisor: Optional[Union[int, float]] = None
    max_rungs: Optional[int] = None
    bracket_rungs: Optional[tuple[int, ...]] = None
    stop_once: Optional[bool] = None
    length_from_script: bool = False

    def improves_on(self, value: float, best: Optional[float]) -> bool:
        """Whether ``value`` of the searcher metric is better than ``best`` (None: no best yet).

        NaN (an AUC over a single class, a diverged loss) is the worst value, as for the
        search: taken as the best, no later value could ever improve on it. A NaN ``best``
        (from a checkpoint written before this rule) counts as none.
        """
        if value != value:
            return False
        if best is None or best != best:
            return True
        return value < best if self.smaller_is_better else value > best

    def to_dict(self) -> dict[str, Any]:
        """Returns the section with defaults filled in, JSON-serializable; only the searcher's own keys."""
        section: dict[str, Any] = {
            "name": self.name,
            "metric": self.metric,
            "smaller_is_better": self.smaller_is_better,
        }
        if not self.length_from_script:
            section["max_length"] = self.max_length.to_dict()
        for key in _SEARCHER_KEYS[self.name]:
            value = getattr(self, key)
            # With bracket_rungs, mode and max_rungs are None: writing them would make the section invalid.
            if value is not None:
                section[key] = list(value) if isinstance(value, tuple) else value
        return section

    def asha_brackets(self) -> tuple[AshaBracket, ...]:
        """Computes the brackets of an ``adaptive_asha`` search, as the reference system does.

        The rung cap is ``R = min(max_rungs, floor(log_d max_length) + 1,
        floor(log_d max_trials) + 1)``. ``aggressive`` gives one bracket of R
        rungs, ``standard`` brackets of R down to ``(R - 1) // 2 + 1`` rungs,
        ``conservative`` R down to 1; ``bracket_rungs`` replaces all that, largest
        first. Each bracket gets trials in proportion to ``d ** (r - 1) / r``
        (at least one; the remainder goes to the first) and an even share of
        ``max_concurrent_trials`` (at least one; extras to the first brackets).
        Rung ``i`` of an ``r``-rung bracket trains to
        ``max(floor(max_length / d ** (r - 1 - i)), 1)``.

        Returns:
            The brackets, the one with the most rungs first.

        Raises:
            ValueError: If the searcher is not ``adaptive_asha``.
        """
        if self.name != ADAPTIVE_ASHA:
            raise ValueError(f"Only the {ADAPTIVE_ASHA} searcher has brackets. Received: searcher {self.name!r}")
        return _plan_brackets(self, "searcher")


_Value = TypeVar("_Value")


def searcher_key(value: Optional[_Value], key: str) -> _Value:
    """``value``, of a key of the searcher's section that validation sets (to its default if not given).

    Keys a searcher does not take are None in :class:`SearcherConfig`; a searcher reads
    its own keys through this, which tells the type checker (and a reader) that they are set.

    Raises:
        AssertionError: the key is None: the searcher does not take it.
    """
    if value is None:
        raise AssertionError(f"searcher.{key} is unset: the searcher reading it does not take it")
    return value


def _powers_up_to(divisor: Fraction, limit: Fraction, cap: int) -> int:
    """Returns ``min(floor(log_divisor(limit)) + 1, cap)``, exactly."""
    count, power = 1, divisor
    while count < cap and power <= limit:
        count, power = count + 1, power * divisor
    return count


def _rung_length(max_length: int, divisor: Fraction, steps_below_top: int) -> int:
    return max(math.floor(Fraction(max_length) / divisor**steps_below_top), 1)


def _rungs_with_distinct_lengths(max_length: int, divisor: Fraction, cap: int) -> int:
    """Most rungs (up to ``cap``) a bracket can have before two of its rungs get the same length.

    For a divisor of 2 or more this is ``floor(log_d max_length) + 1``; a smaller
    divisor can repeat a length earlier, and a repeated length would ask a trial
    to validate again without training.
    """
    count = 1
    while count < cap and _rung_length(max_length, divisor, count) < _rung_length(max_length, divisor, count - 1):
        count += 1
    return count


def _bracket_rungs(config: SearcherConfig, divisor: Fraction, path: str) -> list[int]:
    length = config.max_length.value
    if config.bracket_rungs is not None:
        limit = _rungs_with_distinct_lengths(length, divisor, max(config.bracket_rungs))
        for index, rungs in enumerate(config.bracket_rungs):
            if rungs > limit:
                rule = (
                    f"an integer from 1 to {limit}: with max_length {length} and divisor {config.divisor}, "
                    "a bracket of more rungs would train two of its rungs to the same length"
                )
                raise invalid_value(join(join(path, "bracket_rungs"), index), rule, rungs)
        return sorted(config.bracket_rungs, reverse=True)
    cap = searcher_key(config.max_rungs, "max_rungs")
    top = min(
        cap,
        _rungs_with_distinct_lengths(length, divisor, cap),
        _powers_up_to(divisor, Fraction(searcher_key(config.max_trials, "max_trials")), cap),
    )
    lowest = {"aggressive": top, "standard": (top - 1) // 2 + 1, "conservative": 1}[searcher_key(config.mode, "mode")]
    return list(range(top, lowest - 1, -1))


def _split_trials(config: SearcherConfig, divisor: Fraction, rungs: list[int], path: str) -> list[int]:
    max_trials = searcher_key(config.max_trials, "max_trials")
    weights = [divisor ** (count - 1) / count for count in rungs]
    total = sum(weights)
    trials = [max(math.floor(weight / total * max_trials), 1) for weight in weights]
    trials[0] += max_trials - sum(trials)
    if trials[0] < 1:
        counts = ", ".join(str(count) for count in rungs)
        rule = f"large enough to give each of the {len(rungs)} brackets (of {counts} rungs) at least one trial"
        raise invalid_value(join(path, "max_trials"), rule, max_trials)
    return trials


def _split_concurrency(max_concurrent_trials: int, brackets: int) -> list[int]:
    if max_concurrent_trials == 0:
        return [0] * brackets
    # As in the reference, every bracket runs at least one trial at a time, even
    # when that makes more trials run at once than max_concurrent_trials.
    total = max(max_concurrent_trials, brackets)
    return [total // brackets + (1 if index < total % brackets else 0) for index in range(brackets)]


def _plan_brackets(config: SearcherConfig, path: str) -> tuple[AshaBracket, ...]:
    divisor = Fraction(searcher_key(config.divisor, "divisor"))
    rungs = _bracket_rungs(config, divisor, path)
    trials = _split_trials(config, divisor, rungs, path)
    concurrency = _split_concurrency(searcher_key(config.max_concurrent_trials, "max_concurrent_trials"), len(rungs))
    length = config.max_length.value
    return tuple(
        AshaBracket(
            num_rungs=count,
            max_trials=trials[index],
            max_concurrent_trials=concurrency[index],
            rung_lengths=tuple(_rung_length(length, divisor, count - 1 - rung) for rung in range(count)),
        )
        for index, count in enumerate(rungs)
    )


def _read_name(section: Mapping[str, Any], path: str) -> str:
    rule = f"one of: {', '.join(SEARCHER_NAMES)}"
    name = lookup(section, "name", path, rule)
    if name in SEARCHER_NAMES:
        return name
    if name in _NOT_SUPPORTED_SEARCHERS:
        rule = f'{rule} (the "{name}" searcher is not supported yet)'
    raise invalid_value(join(path, "name"), rule, name)


def _check_searcher_keys(section: Mapping[str, Any], path: str, name: str) -> None:
    """Rejects, in the section's order, keys of other searchers and keys of none."""
    own = _COMMON_KEYS + _SEARCHER_KEYS[name]
    for key in section:
        owners = [other for other, keys in _SEARCHER_KEYS.items() if key in keys and key not in own]
        if owners:
            why = _WHY_NOT.get(name) or f" (only {', '.join(owners)} take{'s' if len(owners) == 1 else ''} it)"
            raise ConfigError(
                f"{PREFIX}`{join(path, key)}` is not supported by the `{name}` searcher{why}; remove it. "
                f"Received: {describe(section[key])}"
            )
    check_keys(section, path, own)


def _read_divisor(section: Mapping[str, Any], path: str) -> Union[int, float]:
    rule = "a number greater than 1"
    divisor = lookup(section, "divisor", path, rule, default=4)
    valid = isinstance(divisor, numbers.Real) and not isinstance(divisor, bool) and math.isfinite(divisor)
    if not valid or divisor <= 1:
        raise invalid_value(join(path, "divisor"), rule, divisor)
    return int(divisor) if isinstance(divisor, numbers.Integral) else float(divisor)


def _read_bracket_rungs(section: Mapping[str, Any], path: str) -> Optional[tuple[int, ...]]:
    rungs = section.get("bracket_rungs")
    if rungs is None:
        return None
    rungs_path = join(path, "bracket_rungs")
    if not isinstance(rungs, (list, tuple)) or not rungs:
        raise invalid_value(rungs_path, _BRACKET_RUNGS_RULE, rungs)
    return tuple(check_int(count, join(rungs_path, index), minimum=1) for index, count in enumerate(rungs))


def _read_asha_shape(section: Mapping[str, Any], path: str) -> dict[str, Any]:
    """Reads ``mode``, ``max_rungs`` and ``bracket_rungs``; the last replaces the other two."""
    bracket_rungs = _read_bracket_rungs(section, path)
    if bracket_rungs is None:
        return {
            "mode": read_choice(section, "mode", path, ASHA_MODES, default="standard"),
            "max_rungs": read_int(section, "max_rungs", path, minimum=1, default=5),
            "bracket_rungs": None,
        }
    for key in ("mode", "max_rungs"):
        if section.get(key) is not None:
            raise ConfigError(
                f"{PREFIX}`{join(path, key)}` cannot be combined with `{join(path, 'bracket_rungs')}`, which sets "
                f"the rungs of every bracket itself; remove one of them. Received: {describe(section[key])}"
            )
    return {"mode": None, "max_rungs": None, "bracket_rungs": bracket_rungs}


def _read_searcher_keys(section: Mapping[str, Any], path: str, name: str) -> dict[str, Any]:
    keys = _SEARCHER_KEYS[name]
    values: dict[str, Any] = {}
    if "max_trials" in keys:
        values["max_trials"] = read_int(section, "max_trials", path, minimum=1)
    if "max_concurrent_trials" in keys:
        values["max_concurrent_trials"] = read_int(
            section, "max_concurrent_trials", path, minimum=0, default=DEFAULT_MAX_CONCURRENT_TRIALS
        )
    if name == ADAPTIVE_ASHA:
        values["divisor"] = _read_divisor(section, path)
        values.update(_read_asha_shape(section, path))
        values["stop_once"] = read_bool(section, "stop_once", path, default=True)
    return values


def _time_metric_as_max_length(section: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The section with the reference's ``time_metric`` (and ``max_time``) as the ``max_length`` they mean.

    The reference's last release measures a trial's length by a metric its validations
    report (``time_metric``), up to ``max_time`` of it. det-estimator counts lengths in
    batches, records or epochs: a ``time_metric`` naming one of them is honoured (``max_time:
    N`` with ``time_metric: batches`` is ``max_length: {batches: N}``); another metric is
    refused, saying what to write instead.
    """
    if "time_metric" not in section and "max_time" not in section:
        return section
    units = ", ".join(unit.value for unit in LengthUnit)
    time_metric = section.get("time_metric")
    if time_metric is None:
        raise ConfigError(
            f"{PREFIX}`{join(path, 'max_time')}` needs `{join(path, 'time_metric')}`, the unit it counts in: one "
            f"of {units}. Received: max_time={describe(section.get('max_time'))} without time_metric"
        )
    if time_metric not in tuple(unit.value for unit in LengthUnit):
        raise ConfigError(
            f"{PREFIX}`{join(path, 'time_metric')}` must be one of {units}: det-estimator measures a trial's "
            "length in those, and not by a metric the trial reports. Give the length as `max_length` (e.g. "
            f"{{batches: 1000}}) instead. Received: {describe(time_metric)}"
        )
    rest = {key: item for key, item in section.items() if key not in ("time_metric", "max_time")}
    if "max_time" not in section:
        max_length = section.get("max_length")
        if isinstance(max_length, Mapping) and time_metric not in max_length:
            raise ConfigError(
                f"{PREFIX}`{join(path, 'time_metric')}` ({time_metric}) is not the unit of "
                f"`{join(path, 'max_length')}`; give the length in {time_metric}, or remove time_metric. "
                f"Received: time_metric={describe(time_metric)}, max_length={describe(max_length)}"
            )
        return rest
    if "max_length" in section:
        raise ConfigError(
            f"{PREFIX}give either `{join(path, 'max_length')}` or `{join(path, 'max_time')}` with "
            f"`{join(path, 'time_metric')}`, not both: each is the trials' length. "
            f"Received: max_length={describe(section['max_length'])}, max_time={describe(section['max_time'])}"
        )
    max_time = check_int(section["max_time"], join(path, "max_time"), minimum=1)
    return {**rest, "max_length": {time_metric: max_time}}


def parse_searcher(value: Any, path: str) -> SearcherConfig:
    """Validates the ``searcher`` section.

    Args:
        value: The raw section.
        path: Its dotted path (``searcher``).

    Returns:
        The searcher config.

    Raises:
        ConfigError: If the section is missing or invalid, names a searcher that
            is not implemented, or has a key its searcher does not take.
    """
    if value is None:
        raise missing_key(path, MAPPING_RULE)
    if not isinstance(value, Mapping):
        raise invalid_value(path, MAPPING_RULE, value)
    # The name decides which keys are valid, so it is checked first.
    name = _read_name(value, path)
    value = _time_metric_as_max_length(value, path)
    _check_searcher_keys(value, path, name)
    length_from_script = value.get("max_length") is None and name == SINGLE
    if length_from_script:
        # The longest length there is: the searcher's one operation never ends the script's training.
        max_length = Length(LengthUnit.BATCHES, INT64_MAX)
    else:
        rule = f"a length such as {{batches: 1000}} (the {name} searcher gives each trial its length from it)"
        max_length = parse_length(lookup(value, "max_length", path, rule), join(path, "max_length"))
    config = SearcherConfig(
        name=name,
        metric=read_str(value, "metric", path, non_empty=True),
        smaller_is_better=read_bool(value, "smaller_is_better", path, default=True),
        max_length=max_length,
        **_read_searcher_keys(value, path, name),
        length_from_script=length_from_script,
    )
    if name == ADAPTIVE_ASHA:
        # Brackets that cannot be built are a config error, reported now rather than when the search starts.
        _plan_brackets(config, path)
    return config

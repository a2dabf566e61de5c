"""Hyperparameter specs: validation, sampling, grid points and serialization.

The ``hyperparameters`` section maps names to specs. A mapping with a ``type``
key is a spec (const, int, double, log or categorical); a mapping without one
is a nested group of hyperparameters; anything else is a constant.
"""

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Callable, Optional, Union

from det_estimator.config._errors import invalid_value, missing_key, non_string_key
from det_estimator.config._fields import (
    MAPPING_RULE,
    check_int,
    check_keys,
    join,
    lookup,
    read_int,
    read_number,
)
from det_estimator.config._json_values import MAX_DEPTH, freeze, thaw, too_deep

GLOBAL_BATCH_SIZE = "global_batch_size"


@dataclass(frozen=True)
class ConstHyperparameter:
    """A hyperparameter with one fixed value.

    Attributes:
        val: The value (frozen: lists are tuples, mappings are read-only).
    """

    val: Any

    def sample(self, rng: random.Random) -> Any:
        """Returns a mutable copy of the value; ``rng`` is unused."""
        return thaw(self.val)

    def grid_count(self) -> int:
        """Returns the number of points of a grid search: 1."""
        return 1

    def grid_point_at(self, position: int) -> Any:
        """Returns the one point of a grid search: the value, frozen."""
        return self.val

    def grid_points(self) -> tuple[Any, ...]:
        """Returns the one point of a grid search: the value, frozen."""
        return (self.val,)

    def to_dict(self) -> dict[str, Any]:
        """Returns the spec as written in a config."""
        return {"type": "const", "val": thaw(self.val)}


@dataclass(frozen=True)
class IntHyperparameter:
    """An integer drawn uniformly from ``[minval, maxval]``, both included.

    Attributes:
        minval: Smallest value.
        maxval: Largest value.
        count: Number of grid points, for searchers that use a grid; None if not given.
    """

    minval: int
    maxval: int
    count: Optional[int] = None

    def sample(self, rng: random.Random) -> int:
        """Draws a value using ``rng``."""
        return rng.randint(self.minval, self.maxval)

    def grid_count(self) -> int:
        """Returns the number of values a grid search tries: ``count``, at most ``maxval - minval + 1``.

        Raises:
            ValueError: If ``count`` is None.
        """
        return min(_require_count(self), self.maxval - self.minval + 1)

    def grid_point_at(self, position: int) -> int:
        """Returns value ``position`` of :meth:`grid_points`, without computing the others."""
        count = self.grid_count()
        if count == 1:
            return _round_half_away_from_zero(Fraction(self.minval + self.maxval, 2))
        return _round_half_away_from_zero(self.minval + Fraction(position * (self.maxval - self.minval), count - 1))

    def grid_points(self) -> tuple[int, ...]:
        """Returns the values a grid search tries, as the reference system computes them.

        ``count`` is capped at ``maxval - minval + 1``; the values are
        ``round(minval + i * (maxval - minval) / (count - 1))``, halves rounded
        away from zero; a count of 1 gives the rounded midpoint.

        Raises:
            ValueError: If ``count`` is None.
        """
        return tuple(self.grid_point_at(position) for position in range(self.grid_count()))

    def to_dict(self) -> dict[str, Any]:
        """Returns the spec as written in a config."""
        return {"type": "int", "minval": self.minval, "maxval": self.maxval, "count": self.count}


@dataclass(frozen=True)
class DoubleHyperparameter:
    """A float drawn uniformly from ``[minval, maxval]``.

    Attributes:
        minval: Smallest value.
        maxval: Largest value.
        count: Number of grid points, for searchers that use a grid; None if not given.
    """

    minval: float
    maxval: float
    count: Optional[int] = None

    def sample(self, rng: random.Random) -> float:
        """Draws a value using ``rng``."""
        return rng.uniform(self.minval, self.maxval)

    def grid_count(self) -> int:
        """Returns the number of values a grid search tries: ``count``.

        Raises:
            ValueError: If ``count`` is None.
        """
        return _require_count(self)

    def grid_point_at(self, position: int) -> float:
        """Returns value ``position`` of :meth:`grid_points`, without computing the others."""
        return _evenly_spaced_at(self.minval, self.maxval, self.grid_count(), position)

    def grid_points(self) -> tuple[float, ...]:
        """Returns ``count`` evenly spaced values from ``minval`` to ``maxval``, both included.

        A count of 1 gives the midpoint.

        Raises:
            ValueError: If ``count`` is None.
        """
        return tuple(self.grid_point_at(position) for position in range(self.grid_count()))

    def to_dict(self) -> dict[str, Any]:
        """Returns the spec as written in a config."""
        return {"type": "double", "minval": self.minval, "maxval": self.maxval, "count": self.count}


@dataclass(frozen=True)
class LogHyperparameter:
    """``base ** x`` for an exponent ``x`` drawn uniformly from ``[minval, maxval]``.

    Attributes:
        minval: Smallest exponent.
        maxval: Largest exponent.
        base: Base of the power; positive.
        count: Number of grid points, for searchers that use a grid; None if not given.
    """

    minval: float
    maxval: float
    base: float
    count: Optional[int] = None

    def sample(self, rng: random.Random) -> float:
        """Draws a value using ``rng``."""
        return self.base ** rng.uniform(self.minval, self.maxval)

    def grid_count(self) -> int:
        """Returns the number of values a grid search tries: ``count``.

        Raises:
            ValueError: If ``count`` is None.
        """
        return _require_count(self)

    def grid_point_at(self, position: int) -> float:
        """Returns value ``position`` of :meth:`grid_points`, without computing the others."""
        return self.base ** _evenly_spaced_at(self.minval, self.maxval, self.grid_count(), position)

    def grid_points(self) -> tuple[float, ...]:
        """Returns ``base ** x`` for ``count`` evenly spaced exponents from ``minval`` to ``maxval``.

        A count of 1 gives the midpoint of the exponents.

        Raises:
            ValueError: If ``count`` is None.
        """
        return tuple(self.grid_point_at(position) for position in range(self.grid_count()))

    def to_dict(self) -> dict[str, Any]:
        """Returns the spec as written in a config."""
        return {"type": "log", "minval": self.minval, "maxval": self.maxval, "base": self.base, "count": self.count}


@dataclass(frozen=True)
class CategoricalHyperparameter:
    """One of a list of values, each equally likely.

    Attributes:
        vals: The values (frozen); at least one.
    """

    vals: tuple[Any, ...]

    def sample(self, rng: random.Random) -> Any:
        """Draws a value using ``rng`` and returns a mutable copy of it."""
        return thaw(rng.choice(self.vals))

    def grid_count(self) -> int:
        """Returns the number of values a grid search tries: all of them."""
        return len(self.vals)

    def grid_point_at(self, position: int) -> Any:
        """Returns value ``position`` of ``vals``, frozen."""
        return self.vals[position]

    def grid_points(self) -> tuple[Any, ...]:
        """Returns every value, frozen, in the order of ``vals``."""
        return self.vals

    def to_dict(self) -> dict[str, Any]:
        """Returns the spec as written in a config."""
        return {"type": "categorical", "vals": thaw(self.vals)}


Hyperparameter = Union[
    ConstHyperparameter, IntHyperparameter, DoubleHyperparameter, LogHyperparameter, CategoricalHyperparameter
]
_RangeHyperparameter = Union[IntHyperparameter, DoubleHyperparameter, LogHyperparameter]


def _require_count(spec: _RangeHyperparameter) -> int:
    if spec.count is None:
        raise ValueError(f"A grid needs the count of every int, double and log hyperparameter. Received: {spec!r}")
    return spec.count


def _round_half_away_from_zero(value: Fraction) -> int:
    # The reference rounds as Go's math.Round does; Python's round() would send 2.5 to 2.
    magnitude = math.floor(abs(value) + Fraction(1, 2))
    return magnitude if value >= 0 else -magnitude


def _evenly_spaced_at(minval: float, maxval: float, count: int, position: int) -> float:
    """Value ``position`` of ``count`` evenly spaced from ``minval`` to ``maxval``; the midpoint if ``count`` is 1."""
    # Exact fractions, rounded once, so that both ends come out exactly as written.
    low, high = Fraction(minval), Fraction(maxval)
    if count == 1:
        return float((low + high) / 2)
    return float(low + (high - low) * position / (count - 1))


def _parse_const(spec: Mapping[str, Any], path: str) -> ConstHyperparameter:
    # `val: null` is a legitimate constant, so presence is what counts here, not null.
    if "val" not in spec:
        raise missing_key(join(path, "val"), "the constant's value")
    return ConstHyperparameter(freeze(spec["val"], join(path, "val")))


def _read_bounds(path: str, read: Callable[[str], Any]) -> tuple[Any, Any]:
    minval, maxval = read("minval"), read("maxval")
    if minval > maxval:
        raise invalid_value(join(path, "minval"), f"less than or equal to `{join(path, 'maxval')}` ({maxval})", minval)
    return minval, maxval


def _read_count(spec: Mapping[str, Any], path: str) -> Optional[int]:
    return read_int(spec, "count", path, minimum=1, default=None)


def _parse_int(spec: Mapping[str, Any], path: str) -> IntHyperparameter:
    minval, maxval = _read_bounds(path, lambda key: read_int(spec, key, path))
    return IntHyperparameter(minval, maxval, _read_count(spec, path))


def _parse_double(spec: Mapping[str, Any], path: str) -> DoubleHyperparameter:
    minval, maxval = _read_bounds(path, lambda key: read_number(spec, key, path))
    return DoubleHyperparameter(minval, maxval, _read_count(spec, path))


def _parse_log(spec: Mapping[str, Any], path: str) -> LogHyperparameter:
    minval, maxval = _read_bounds(path, lambda key: read_number(spec, key, path))
    base = read_number(spec, "base", path)
    if base <= 0:
        raise invalid_value(join(path, "base"), "a positive number", spec["base"])
    if base == 1:
        # 1 ** anything is 1: every value drawn would be 1.0, which is a `const`, not a search.
        raise invalid_value(
            join(path, "base"),
            "a positive number other than 1 (1 ** x is 1 for every x; use type: const)",
            spec["base"],
        )
    # Caught here rather than as an OverflowError when a trial's values are drawn.
    for key, exponent in (("minval", minval), ("maxval", maxval)):
        try:
            base**exponent
        except OverflowError:
            rule = f"small enough in magnitude that {base:g} ** {key} is a finite float"
            raise invalid_value(join(path, key), rule, spec[key]) from None
    return LogHyperparameter(minval, maxval, base, _read_count(spec, path))


def _parse_categorical(spec: Mapping[str, Any], path: str) -> CategoricalHyperparameter:
    vals = lookup(spec, "vals", path, "a non-empty list")
    if not isinstance(vals, (list, tuple)) or not vals:
        raise invalid_value(join(path, "vals"), "a non-empty list", vals)
    return CategoricalHyperparameter(freeze(vals, join(path, "vals")))


# Each spec type: the keys it accepts, and its parser.
_SPEC_TYPES: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any], str], Hyperparameter]]] = {
    "const": (("type", "val"), _parse_const),
    "int": (("type", "minval", "maxval", "count"), _parse_int),
    "double": (("type", "minval", "maxval", "count"), _parse_double),
    "log": (("type", "minval", "maxval", "base", "count"), _parse_log),
    "categorical": (("type", "vals"), _parse_categorical),
}


def _parse_spec(spec: Mapping[str, Any], path: str) -> Hyperparameter:
    kind = spec["type"]
    if not isinstance(kind, str) or kind not in _SPEC_TYPES:
        raise invalid_value(join(path, "type"), f"one of: {', '.join(sorted(_SPEC_TYPES))}", kind)
    keys, parse = _SPEC_TYPES[kind]
    check_keys(spec, path, keys)
    return parse(spec, path)


def _parse_node(value: Any, path: str, depth: int) -> Union[Hyperparameter, Mapping[str, Any]]:
    if not isinstance(value, Mapping):
        return ConstHyperparameter(freeze(value, path, depth))
    # As in the reference format, a `type` key is what tells a spec from a nested group.
    if "type" in value:
        return _parse_spec(value, path)
    return _parse_group(value, path, depth)


def _parse_group(group: Mapping[Any, Any], path: str, depth: int = 0) -> Mapping[str, Any]:
    if depth >= MAX_DEPTH:  # a group that contains itself would never end
        raise too_deep(path)
    parsed = {}
    for name, value in group.items():
        if not isinstance(name, str):
            raise non_string_key(path, name)
        parsed[name] = _parse_node(value, join(path, name), depth + 1)
    return MappingProxyType(parsed)


def parse_hyperparameters(value: Any, path: str) -> Mapping[str, Any]:
    """Validates the ``hyperparameters`` section.

    Args:
        value: The raw section.
        path: Its dotted path (``hyperparameters``).

    Returns:
        A read-only mapping from name to a spec object or, for a nested group,
        to a read-only mapping of the same kind.

    Raises:
        ConfigError: If the section is missing or not a mapping, or a spec is invalid.
    """
    if value is None:
        raise missing_key(path, f"{MAPPING_RULE} that includes `{GLOBAL_BATCH_SIZE}`")
    if not isinstance(value, Mapping):
        raise invalid_value(path, MAPPING_RULE, value)
    return _parse_group(value, path)


def check_global_batch_size(section: Mapping[str, Any], path: str) -> int:
    """Checks that ``global_batch_size`` can only take positive integer values.

    Call after :func:`parse_hyperparameters` succeeded on the same section, so
    that every spec is known to be well formed.

    Args:
        section: The raw ``hyperparameters`` section.
        path: Its dotted path (``hyperparameters``).

    Returns:
        The smallest value the global batch size can take.

    Raises:
        ConfigError: If it is missing, or could take a value that is not a
            positive integer.
    """
    path = join(path, GLOBAL_BATCH_SIZE)
    value = section.get(GLOBAL_BATCH_SIZE)
    if value is None:
        raise missing_key(path, "a positive integer")
    if not isinstance(value, Mapping):
        return check_int(value, path, minimum=1)
    kind = value.get("type")
    if kind == "const":
        return check_int(value["val"], join(path, "val"), minimum=1)
    if kind == "int":
        return check_int(value["minval"], join(path, "minval"), minimum=1)
    if kind == "categorical":
        vals_path = join(path, "vals")
        return min(check_int(item, join(vals_path, index), minimum=1) for index, item in enumerate(value["vals"]))
    rule = "a positive integer, or a const, int or categorical hyperparameter whose values are positive integers"
    raise invalid_value(path, rule, value)


def sample_hyperparameters(space: Mapping[str, Any], seed: int, path: str = "") -> dict[str, Any]:
    """Draws the values of one trial.

    Every hyperparameter draws from its own ``random.Random`` seeded with the
    seed and its dotted name (e.g. ``"7:optimizer.lr"``), so the draw is
    reproducible across processes and platforms, and adding or removing one
    hyperparameter leaves the values of all others unchanged.

    Args:
        space: A mapping returned by :func:`parse_hyperparameters`.
        seed: The trial's seed.
        path: Dotted name of ``space``; "" for the whole section.

    Returns:
        Name to value; nested groups give nested dicts.
    """
    values = {}
    for name, node in space.items():
        dotted = join(path, name)
        if isinstance(node, Mapping):
            values[name] = sample_hyperparameters(node, seed, dotted)
        else:
            values[name] = node.sample(random.Random(f"{seed}:{dotted}"))
    return values


def hyperparameters_to_dict(space: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the section in its explicit form: every constant as ``{type: const, val}``.

    Args:
        space: A mapping returned by :func:`parse_hyperparameters`.

    Returns:
        A JSON-serializable dict that :func:`parse_hyperparameters` accepts.
    """
    return {
        name: hyperparameters_to_dict(node) if isinstance(node, Mapping) else node.to_dict()
        for name, node in space.items()
    }


def _grid_axes(
    space: Mapping[str, Any], path: str, names: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Hyperparameter]]:
    """Returns ``(names from the top, spec)`` of every leaf, depth first, in the config's order.

    The specs' grid points are not listed: a grid's axes may be long (a ``count`` of
    millions), and a search needs only their lengths and one point at a time.
    """
    axes = []
    for name, node in space.items():
        dotted = join(path, name)
        if isinstance(node, Mapping):
            axes.extend(_grid_axes(node, dotted, (*names, name)))
            continue
        if isinstance(node, (IntHyperparameter, DoubleHyperparameter, LogHyperparameter)) and node.count is None:
            rule = "a positive integer: the number of values the grid searcher tries for this hyperparameter"
            raise missing_key(join(dotted, "count"), rule)
        axes.append(((*names, name), node))
    return axes


def grid_size(space: Mapping[str, Any], path: str = "hyperparameters") -> int:
    """Counts the points of a grid search: the product of every hyperparameter's number of grid points.

    Args:
        space: A mapping returned by :func:`parse_hyperparameters`.
        path: Dotted name of ``space``, for messages.

    Returns:
        The number of points; at least 1.

    Raises:
        ConfigError: If an int, double or log hyperparameter has no ``count``;
            the message names its ``count`` key.
    """
    return math.prod(count for _, count in grid_counts(space, path))


def grid_counts(space: Mapping[str, Any], path: str = "hyperparameters") -> list[tuple[str, int]]:
    """Lists every hyperparameter's number of grid points, by dotted path, in the config's order.

    Args:
        space: A mapping returned by :func:`parse_hyperparameters`.
        path: Dotted name of ``space``, for the paths and messages.

    Returns:
        ``(dotted path, number of grid points)`` of every hyperparameter; their product is :func:`grid_size`.

    Raises:
        ConfigError: If an int, double or log hyperparameter has no ``count``.
    """
    return [(join(path, ".".join(names)), spec.grid_count()) for names, spec in _grid_axes(space, path)]


def grid_point(space: Mapping[str, Any], index: int, path: str = "hyperparameters") -> dict[str, Any]:
    """Returns the hyperparameter values of one point of a grid search.

    Points are numbered as ``itertools.product`` numbers them over the
    hyperparameters in the config's order (nested ones depth first): the last
    hyperparameter changes fastest.

    Args:
        space: A mapping returned by :func:`parse_hyperparameters`.
        index: The point's number, from 0 to ``grid_size(space) - 1``.
        path: Dotted name of ``space``, for messages.

    Returns:
        Name to value, mutable; nested groups give nested dicts, in the config's order.

    Raises:
        ConfigError: If an int, double or log hyperparameter has no ``count``.
        IndexError: If ``index`` is out of range.
    """
    axes = _grid_axes(space, path)
    size = math.prod(spec.grid_count() for _, spec in axes)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise IndexError(f"A grid point index must be an integer from 0 to {size - 1}. Received: {index!r}")
    chosen = {}
    for names, spec in reversed(axes):
        index, position = divmod(index, spec.grid_count())
        chosen[names] = spec.grid_point_at(position)
    return _assemble(space, chosen, ())


def _assemble(space: Mapping[str, Any], chosen: dict[tuple[str, ...], Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {
        name: _assemble(node, chosen, (*names, name)) if isinstance(node, Mapping) else thaw(chosen[(*names, name)])
        for name, node in space.items()
    }

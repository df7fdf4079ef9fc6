"""The environment configuration the engineer edits: schema, YAML I/O, projection and diff.

A configuration says, per map size (3..10), which share of a round's instances has that size
(``data_ratio``), how many cells are holes (``hole_ratio``) and which share of instances needs a WAIT
(``wait_ratio``); plus the agent count, the round's instance budget and the seed.

Example (YAML)::

    num_agents: 2
    num_instances: 4000
    seed: 0
    sizes:
      3: {data_ratio: 0.5, hole_ratio: 0.2, wait_ratio: 0.5}
      6: {data_ratio: 0.5, hole_ratio: 0.3, wait_ratio: 0.25}
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

MIN_SIZE, MAX_SIZE = 3, 10
SIZES = tuple(range(MIN_SIZE, MAX_SIZE + 1))

# Legal range of every numeric knob: the single source for the schema, error messages and projection.
RANGES: dict[str, tuple[float, float]] = {
    "data_ratio": (0.0, 1.0),
    "hole_ratio": (0.0, 0.6),
    "wait_ratio": (0.0, 1.0),
    "num_agents": (1, 8),
    "num_instances": (1, 1_000_000),
    "seed": (0, 2**32 - 1),
}
RATIO_SUM_TOLERANCE = 1e-6


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names every bad field."""


def _range_field(name: str, default: Any = ..., description: str = "") -> Any:
    low, high = RANGES[name]
    return Field(default, ge=low, le=high, description=description)


class SizeConfig(BaseModel):
    """Knobs of one map size."""

    model_config = ConfigDict(extra="forbid")

    data_ratio: float = _range_field("data_ratio", description="share of the round's instances")
    hole_ratio: float = _range_field("hole_ratio", description="share of cells that are holes")
    wait_ratio: float = _range_field("wait_ratio", description="share of instances that need a WAIT")


def free_cells(size: int, hole_ratio: float) -> int:
    """Cells left free on a ``size`` x ``size`` map: the generator makes round(hole_ratio x cells) holes."""
    cells = size * size
    return cells - int(hole_ratio * cells + 0.5)


def min_free_cells(num_agents: int) -> int:
    """Fewest free cells that can hold distinct starts and goals with every agent having to move."""
    return num_agents + 1


class EnvConfig(BaseModel):
    """One round's environment configuration."""

    model_config = ConfigDict(extra="forbid")

    sizes: dict[int, SizeConfig] = Field(min_length=1, description="map size (3..10) -> knobs")
    num_agents: int = _range_field("num_agents", 2, "agents per instance")
    num_instances: int = _range_field("num_instances", 4000, "instances per round (the budget)")
    seed: int = _range_field("seed", 0, "seed of every random choice of the generator")

    @model_validator(mode="after")
    def _check(self) -> EnvConfig:
        problems = []
        for size in self.sizes:
            if not MIN_SIZE <= size <= MAX_SIZE:
                problems.append(f"sizes.{size}: map size must be in [{MIN_SIZE}, {MAX_SIZE}]")
        total = sum(s.data_ratio for s in self.sizes.values())
        if abs(total - 1.0) > RATIO_SUM_TOLERANCE:
            problems.append(f"sizes.*.data_ratio: must sum to 1 (got {total:.6g})")
        for size, knobs in self.sizes.items():
            if knobs.data_ratio > 0 and free_cells(size, knobs.hole_ratio) < min_free_cells(self.num_agents):
                problems.append(
                    f"sizes.{size}.hole_ratio: {knobs.hole_ratio} leaves {free_cells(size, knobs.hole_ratio)} "
                    f"free cells, fewer than the {min_free_cells(self.num_agents)} that "
                    f"{self.num_agents} agents need"
                )
        if problems:
            raise ValueError("; ".join(problems))
        self.sizes = dict(sorted(self.sizes.items()))
        return self

    def instance_counts(self) -> dict[int, int]:
        """Instances per size: ``num_instances`` split by data ratio (largest remainder, deterministic)."""
        return split_by_ratios(self.num_instances, {s: k.data_ratio for s, k in self.sizes.items()})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json") | {"sizes": {s: k.model_dump() for s, k in self.sizes.items()}}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def split_by_ratios(total: int, ratios: dict[int, float]) -> dict[int, int]:
    """Split ``total`` into integer parts proportional to ``ratios`` (largest remainder method)."""
    weight = sum(ratios.values())
    exact = {k: total * r / weight if weight else 0.0 for k, r in ratios.items()}
    counts = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(counts.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - counts[k]), k))[:left]:
        counts[k] += 1
    return counts


def count_with_ratio(total: int, ratio: float) -> int:
    """How many of ``total`` items a ratio asks for (half rounds up)."""
    return int(total * ratio + 0.5)


def proposal_schema(agent_count: bool = False) -> dict[str, Any]:
    """JSON schema of a configuration written by an LLM: sizes as fixed keys "3".."10" (at least one), each
    knob one of the multiples of 0.05 in its range, no other fields. Decoding under it keeps answers short
    and parseable even for a tiny model; ``project`` still makes the result legal (ratios summing to 1,
    enough free cells). The budget and seed are the run's, not the engineer's; so is the agent count unless
    ``agent_count`` (then an optional ``num_agents`` in its range)."""

    def grid(name: str) -> dict[str, Any]:
        low, high = RANGES[name]
        return {
            "type": "number",
            "enum": [round(i * 0.05, 2) for i in range(round(low / 0.05), round(high / 0.05) + 1)],
        }

    knobs = {
        "type": "object",
        "properties": {name: grid(name) for name in SizeConfig.model_fields},
        "required": list(SizeConfig.model_fields),
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {
            "sizes": {
                "type": "object",
                "properties": {str(size): knobs for size in SIZES},
                "additionalProperties": False,
                "minProperties": 1,
            },
        },
        "required": ["sizes"],
        "additionalProperties": False,
    }
    if agent_count:
        low, high = RANGES["num_agents"]
        schema["properties"]["num_agents"] = {"type": "integer", "minimum": low, "maximum": high}
    return schema


def format_errors(error: ValidationError, what: str = "environment config") -> str:
    """Every problem of a validation error on its own line, named by its path."""
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        name = str(item["loc"][-1]) if item["loc"] else ""
        kind = item["type"]
        if kind == "extra_forbidden":
            lines.append(f"{path}: unknown field")
        elif kind == "missing":
            lines.append(f"{path}: required field is missing")
        elif name in RANGES and kind in {"greater_than_equal", "less_than_equal", "float_parsing", "int_parsing"}:
            low, high = RANGES[name]
            lines.append(f"{path}: {item['input']!r} is not in the allowed range [{low}, {high}]")
        elif kind == "value_error":
            lines.append(str(item["msg"]).removeprefix("Value error, "))
        else:
            lines.append(f"{path}: {item['msg']} (got {item.get('input')!r})")
    return f"invalid {what}:\n  " + "\n  ".join(lines)


def parse_config(data: Any) -> EnvConfig:
    """Validate a dict strictly; raise ``ConfigError`` naming every bad field."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid environment config: expected a mapping, got {type(data).__name__}")
    try:
        return EnvConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_errors(error)) from None


def load_config(path: str | Path) -> EnvConfig:
    """Read and strictly validate a YAML configuration file."""
    text = Path(path).read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    try:
        return parse_config(data)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def save_config(config: EnvConfig, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(config.to_yaml())


def default_config(num_agents: int = 2, num_instances: int = 4000, seed: int = 0) -> EnvConfig:
    """Uniform over all sizes, 20% holes, half of the instances need a WAIT."""
    share = 1.0 / len(SIZES)
    sizes = {s: SizeConfig(data_ratio=share, hole_ratio=0.2, wait_ratio=0.5) for s in SIZES}
    return EnvConfig(sizes=sizes, num_agents=num_agents, num_instances=num_instances, seed=seed)


class RandomPin(BaseModel):
    """Knobs of the random configuration held at one value on every size (none: drawn)."""

    model_config = ConfigDict(extra="forbid")

    data_ratio: float | None = Field(None, gt=0.0, le=1.0, description="the same share for every size")
    hole_ratio: float | None = _range_field("hole_ratio", None)
    wait_ratio: float | None = _range_field("wait_ratio", None)


def random_config(seed: int, num_agents: int = 2, num_instances: int = 4000, pin: RandomPin | None = None) -> EnvConfig:
    """A random legal configuration (the paper's round-0 default and the domain-randomisation baseline).

    ``pin`` holds knobs at one value; the other knobs are drawn exactly as without it."""
    rng = random.Random(seed)
    held = pin.model_dump(exclude_none=True) if pin else {}
    raw = {
        "sizes": {
            s: {
                "data_ratio": rng.random(),
                "hole_ratio": round(rng.uniform(*RANGES["hole_ratio"]), 2),
                "wait_ratio": round(rng.random(), 2),
            }
            | held
            for s in SIZES
        },
        "num_agents": num_agents,
        "num_instances": num_instances,
        "seed": seed,
    }
    config, _ = project(raw)
    return config


# ----------------------------------------------------------------------------------------------
# Projection of arbitrary proposals onto the legal configuration space.


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        percent = text.endswith("%")
        try:
            number = float(text.rstrip("%").strip())
        except ValueError:
            return None
        if not math.isfinite(number):
            return None
        return number / 100 if percent else number
    return None


def _as_size(key: Any) -> int | None:
    match = re.fullmatch(r"\s*(\d+)\s*(?:x\s*(\d+))?\s*", str(key))
    if not match or (match.group(2) and match.group(2) != match.group(1)):
        return None
    return int(match.group(1))


def _clamp(name: str, value: float, path: str, notes: list[str]) -> float:
    low, high = RANGES[name]
    if value < low or value > high:
        clamped = min(max(value, low), high)
        notes.append(f"{path}: {value:g} clamped to {clamped:g} (allowed [{low:g}, {high:g}])")
        return clamped
    return value


def _project_number(raw: dict, name: str, fallback: float, path: str, notes: list[str], integer: bool) -> float:
    if name not in raw:
        return fallback
    value = _as_number(raw[name])
    if value is None:
        notes.append(f"{path}: {raw[name]!r} is not a number; kept {fallback:g}")
        return fallback
    if integer and value != round(value):
        notes.append(f"{path}: {value:g} rounded to {round(value)}")
        value = float(round(value))
    value = _clamp(name, value, path, notes)
    return int(value) if integer else value


def project(raw: Any, base: EnvConfig | None = None) -> tuple[EnvConfig, list[str]]:
    """The nearest legal configuration to ``raw`` and the list of what was changed to get there.

    Missing fields come from ``base`` (default: ``default_config()``); unknown keys and unusable values
    are dropped and noted; numbers are clamped to their ranges; data ratios are renormalised to sum to 1;
    hole ratios are lowered where they would leave too few free cells for the agents.
    """
    base = base or default_config()
    notes: list[str] = []
    if not isinstance(raw, dict):
        notes.append(f"proposal is a {type(raw).__name__}, not a mapping; kept the previous config")
        return base, notes
    for key in raw:
        if key not in EnvConfig.model_fields:
            notes.append(f"{key}: unknown field dropped")

    scalars = {}
    for name in ("num_agents", "num_instances", "seed"):
        scalars[name] = int(_project_number(raw, name, getattr(base, name), name, notes, integer=True))

    sizes: dict[int, dict[str, float]] = {}
    raw_sizes = raw.get("sizes", None)
    if raw_sizes is None:
        raw_sizes = {s: k.model_dump() for s, k in base.sizes.items()}
    if not isinstance(raw_sizes, dict):
        notes.append(f"sizes: {type(raw_sizes).__name__} is not a mapping; kept the previous sizes")
        raw_sizes = {s: k.model_dump() for s, k in base.sizes.items()}
    for key, knobs in raw_sizes.items():
        size = _as_size(key)
        if size is None or not MIN_SIZE <= size <= MAX_SIZE:
            notes.append(f"sizes.{key}: not a map size in [{MIN_SIZE}, {MAX_SIZE}]; dropped")
            continue
        if size in sizes:
            notes.append(f"sizes.{key}: duplicate of size {size}; dropped")
            continue
        if not isinstance(knobs, dict):
            notes.append(f"sizes.{key}: {knobs!r} is not a mapping; dropped")
            continue
        previous = base.sizes.get(size)
        fallback = previous.model_dump() if previous else {"data_ratio": 0.0, "hole_ratio": 0.2, "wait_ratio": 0.5}
        for field_name in knobs:
            if field_name not in SizeConfig.model_fields:
                notes.append(f"sizes.{size}.{field_name}: unknown field dropped")
        sizes[size] = {
            name: _project_number(knobs, name, fallback[name], f"sizes.{size}.{name}", notes, integer=False)
            for name in SizeConfig.model_fields
        }

    total = sum(k["data_ratio"] for k in sizes.values())
    if not sizes or total <= 0:
        notes.append("sizes: no size has a positive data_ratio; kept the previous sizes")
        sizes = {s: k.model_dump() for s, k in base.sizes.items()}
        total = sum(k["data_ratio"] for k in sizes.values())
    if abs(total - 1.0) > RATIO_SUM_TOLERANCE:
        notes.append(f"sizes.*.data_ratio: renormalised from a sum of {total:.6g} to 1")
        for knobs in sizes.values():
            knobs["data_ratio"] /= total

    need = min_free_cells(scalars["num_agents"])
    for size, knobs in sizes.items():
        if knobs["data_ratio"] > 0 and free_cells(size, knobs["hole_ratio"]) < need:
            holes = size * size - need
            lowered = holes / (size * size)
            notes.append(
                f"sizes.{size}.hole_ratio: {knobs['hole_ratio']:g} lowered to {lowered:.4g} to leave "
                f"{need} free cells for {scalars['num_agents']} agents"
            )
            knobs["hole_ratio"] = lowered
    config = EnvConfig(sizes={s: SizeConfig(**k) for s, k in sizes.items()}, **scalars)
    return config, notes


def diff(a: EnvConfig, b: EnvConfig) -> list[str]:
    """Readable per-field differences from ``a`` to ``b``, one line each."""
    lines = []
    for name in ("num_agents", "num_instances", "seed"):
        if getattr(a, name) != getattr(b, name):
            lines.append(f"{name}: {getattr(a, name)} -> {getattr(b, name)}")
    for size in sorted(set(a.sizes) | set(b.sizes)):
        old, new = a.sizes.get(size), b.sizes.get(size)
        if old is None:
            lines.append(f"sizes.{size}: added ({_knobs_text(new)})")
        elif new is None:
            lines.append(f"sizes.{size}: removed (was {_knobs_text(old)})")
        else:
            for name in SizeConfig.model_fields:
                x, y = getattr(old, name), getattr(new, name)
                if not math.isclose(x, y, abs_tol=1e-9):
                    lines.append(f"sizes.{size}.{name}: {x:.4g} -> {y:.4g}")
    return lines


def _knobs_text(knobs: SizeConfig) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in knobs.model_dump().items())

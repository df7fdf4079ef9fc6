"""The instance record and its JSON Lines interchange format (one instance a line)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from env.grid import MOVE_NAMES, Cell, Grid


class InstanceError(ValueError):
    """A malformed instance record."""


class Instance(BaseModel):
    """A solved MAPF-FrozenLake instance. Cells are ``[row, col]``; (0, 0) is the top left."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    size: int
    holes: list[Cell]
    starts: list[Cell]
    goals: list[Cell]
    optimal_makespan: int
    optimal_sum_of_costs: int
    requires_wait: bool
    seed: int
    solution: list[list[str]]

    @field_validator("solution")
    @classmethod
    def _known_moves(cls, solution: list[list[str]]) -> list[list[str]]:
        for moves in solution:
            for move in moves:
                if move not in MOVE_NAMES:
                    raise ValueError(f"unknown move {move!r}")
        return solution

    @property
    def num_agents(self) -> int:
        return len(self.starts)

    @property
    def hole_ratio(self) -> float:
        return len(self.holes) / (self.size * self.size)

    @property
    def grid(self) -> Grid:
        return Grid(self.size, self.holes)

    def to_json(self) -> str:
        """One compact, key-ordered JSON line (byte-identical for equal instances)."""
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"))


def as_instance(value: Instance | dict) -> Instance:
    """An ``Instance``, or one record as read from JSON Lines (a dict); ``InstanceError`` for a malformed
    record, ``TypeError`` for anything else."""
    if isinstance(value, Instance):
        return value
    if isinstance(value, dict):
        try:
            return Instance.model_validate(value)
        except ValidationError as error:
            raise InstanceError(f"not a valid instance: {error}") from None
    raise TypeError(f"expected an Instance or a dict as read from JSON Lines, not {type(value).__name__}")


def read_instances(path: str | Path) -> list[Instance]:
    """Load a JSON Lines file of instances; a bad line raises ``InstanceError`` naming its number."""
    return list(iter_instances(path))


def iter_instances(path: str | Path) -> Iterator[Instance]:
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield Instance.model_validate_json(line)
            except ValidationError as error:
                raise InstanceError(f"{path}:{number}: not a valid instance: {error}") from None


def write_instances(instances: Iterable[Instance], path: str | Path) -> int:
    """Write instances as JSON Lines; returns how many were written."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w") as handle:
        for instance in instances:
            handle.write(instance.to_json() + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[dict]:
    """Load a JSON Lines file of objects; a bad line raises ``ValueError`` naming its number."""
    rows = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not valid JSON: {error}") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object")
            rows.append(row)
    return rows

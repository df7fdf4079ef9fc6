"""Failure statistics: counts of verdicts by instance features (map size, agent count, hole ratio, WAIT).

The rollout workers fill one table per batch, the buffer merges them into a running table, validation
fills one for the held-out split, and the environment engineer reads them. Plain data: merging,
JSON round trips and rates are pure functions of the counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from env.evaluate import FAILURE_CATEGORIES, Verdict
from env.instance import Instance

Key = tuple[int, int, float, bool]  # (size, num_agents, hole_ratio rounded to 0.05, requires_wait)
HOLE_BIN = 0.05


def features(instance: Instance) -> Key:
    """The cell of the table an instance falls in."""
    hole_ratio = round(round(instance.hole_ratio / HOLE_BIN) * HOLE_BIN, 2)
    return instance.size, instance.num_agents, hole_ratio, instance.requires_wait


@dataclass
class Cell:
    """Counts of one cell: responses, valid, optimal (makespan), and failures by category."""

    total: int = 0
    valid: int = 0
    optimal: int = 0
    failures: Counter = field(default_factory=Counter)

    def add(self, verdict: Verdict) -> None:
        self.total += 1
        self.valid += verdict.valid
        self.optimal += verdict.optimal
        if verdict.failure:
            self.failures[verdict.failure] += 1

    def merge(self, other: Cell) -> None:
        self.total += other.total
        self.valid += other.valid
        self.optimal += other.optimal
        self.failures.update(other.failures)


@dataclass
class FailureTable:
    """Verdict counts per feature cell."""

    cells: dict[Key, Cell] = field(default_factory=dict)

    def add(self, instance: Instance, verdict: Verdict) -> None:
        self.cells.setdefault(features(instance), Cell()).add(verdict)

    def merge(self, other: FailureTable) -> FailureTable:
        for key, cell in other.cells.items():
            self.cells.setdefault(key, Cell()).merge(cell)
        return self

    def overall(self) -> Cell:
        total = Cell()
        for cell in self.cells.values():
            total.merge(cell)
        return total

    def by(self, feature: str) -> dict:
        """Cells folded onto one feature: ``size``, ``num_agents``, ``hole_ratio`` or ``requires_wait``."""
        index = ("size", "num_agents", "hole_ratio", "requires_wait").index(feature)
        folded: dict = {}
        for key, cell in sorted(self.cells.items()):
            folded.setdefault(key[index], Cell()).merge(cell)
        return folded

    def summary(self) -> dict:
        """Totals, valid and optimal rates, and the share of each failure category."""
        cell = self.overall()
        n = max(cell.total, 1)
        return {
            "responses": cell.total,
            "valid_rate": cell.valid / n,
            "optimal_rate": cell.optimal / n,
            "failures": {c: cell.failures[c] / n for c in FAILURE_CATEGORIES},
        }

    def to_dict(self) -> dict:
        return {
            "cells": [
                {
                    "size": k[0],
                    "num_agents": k[1],
                    "hole_ratio": k[2],
                    "requires_wait": k[3],
                    "total": c.total,
                    "valid": c.valid,
                    "optimal": c.optimal,
                    "failures": dict(sorted(c.failures.items())),
                }
                for k, c in sorted(self.cells.items())
            ]
        }

    @classmethod
    def from_dict(cls, data: dict) -> FailureTable:
        table = cls()
        for row in data.get("cells", []):
            key = (row["size"], row["num_agents"], row["hole_ratio"], row["requires_wait"])
            table.cells[key] = Cell(row["total"], row["valid"], row["optimal"], Counter(row["failures"]))
        return table

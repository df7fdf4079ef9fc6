"""Solver-scored level replay (the ``plr-levels`` engineer): PLR over individual instances, with ACCEL edits.

Every instance GRPO trains on is a *level*. The trajectory buffer keeps each level with its latest score, the
mean regret of its samples (``env.evaluate.regret``: 0 for an optimal plan, up to 0.5 for a valid plan by
its gap to the optimum, 0.5..1 for an invalid plan by how early it failed), and the global step it was last
played. Between rounds the engineer keeps the ``capacity`` highest-scoring levels and draws
``levels_per_round`` of them without replacement from jaxued's replay distribution

    P = (1 - staleness) x P_rank + staleness x P_stale,
    P_rank(i) ~ (1 / rank_i) ^ (1 / temperature),   P_stale(i) ~ step_now - last_played_i,

then adds one ACCEL mutant of each (a hole toggled or a goal moved, re-solved: solvable, optimum known).
The next round's rollout workers take each instance from that replay set with probability
``replay_probability`` and from the generator otherwise; a batch records which (``TrajectoryBatch.replayed``).
The configuration itself is kept as it is (the generator's share is still drawn from it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from env.generator import derive_seed, mutate
from env.instance import Instance, as_instance


class LevelReplayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replay_probability: float = Field(0.8, ge=0.0, le=1.0, description="share of a round's instances replayed")
    staleness: float = Field(0.3, ge=0.0, le=1.0, description="weight of the staleness term in P")
    temperature: float = Field(0.3, gt=0.0, description="rank prioritisation temperature")
    capacity: int = Field(1000, ge=1, description="levels kept (the highest scores)")
    levels_per_round: int = Field(32, ge=1, description="levels drawn for the next round (each + one mutant)")
    mutate: bool = Field(True, description="add one ACCEL mutant of every drawn level")


@dataclass
class Level:
    """One trained-on instance, its latest score and when it was last played."""

    instance: dict  # Instance.model_dump()
    score: float  # mean regret of its latest samples, in [0, 1]
    last_step: int  # global step it was last played at


@dataclass
class ReplaySet:
    """The levels a round replays and how often: rollout workers ``mix`` them into their draws."""

    levels: list[Instance]
    probability: float

    def mix(self, instances: list[Instance], seed: int) -> tuple[list[Instance], list[bool]]:
        """Each instance replaced by a replay level with probability ``probability`` (seeded); returns the
        instances and which were replayed."""
        rng = random.Random(seed)
        mixed, replayed = [], []
        for instance in instances:
            replay = bool(self.levels) and rng.random() < self.probability
            mixed.append(rng.choice(self.levels) if replay else instance)
            replayed.append(replay)
        return mixed, replayed


def replay_distribution(levels: list[Level], step_now: int, temperature: float, staleness: float) -> np.ndarray:
    """jaxued's level-sampling distribution: rank prioritisation of the scores mixed with staleness."""
    scores = np.array([level.score for level in levels], dtype=np.float64)
    ranks = np.empty(len(levels))
    ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(levels) + 1)
    by_rank = (1.0 / ranks) ** (1.0 / temperature)
    by_rank /= by_rank.sum()
    stale = np.array([step_now - level.last_step for level in levels], dtype=np.float64)
    by_staleness = stale / stale.sum() if stale.sum() > 0 else np.full(len(levels), 1.0 / len(levels))
    return (1 - staleness) * by_rank + staleness * by_staleness


def choose_levels(levels: list[Level], step_now: int, settings: LevelReplayConfig, seed: int) -> list[Instance]:
    """The next round's replay set: ``levels_per_round`` levels drawn from the buffer's best ``capacity`` by
    the replay distribution, each followed by its ACCEL mutant when that re-solves (ids ``<id>~m<seed>``)."""
    kept = sorted(levels, key=lambda level: -level.score)[: settings.capacity]
    if not kept:
        return []
    probabilities = replay_distribution(kept, step_now, settings.temperature, settings.staleness)
    rng = np.random.default_rng(seed)
    count = min(settings.levels_per_round, len(kept))
    chosen = rng.choice(len(kept), size=count, replace=False, p=probabilities)
    replay = []
    for index in chosen:
        level = as_instance(kept[index].instance)
        replay.append(level)
        if settings.mutate:
            mutant_seed = derive_seed(seed, level.id)
            mutant = mutate(level, random.Random(mutant_seed), f"{level.id.split('~')[0]}~m{mutant_seed % 10**6}")
            if mutant is not None:
                replay.append(mutant)
    return replay

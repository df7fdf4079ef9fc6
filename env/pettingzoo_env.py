"""PettingZoo ``ParallelEnv``: all agents of one instance move one step at a time.

Actions are ``Discrete(5)`` in the order UP, DOWN, LEFT, RIGHT, WAIT. Each agent observes its own cell,
its goal, the other agents' cells and the hole map (flattened). The conflict rules are the evaluator's:
the first broken rule ends the episode for everyone with the failure reward; all agents on their goals
ends it with the valid reward (plus the optimal bonus when the makespan is optimal); ``max_steps``
truncates it.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

from env.evaluate import RewardConfig, Verdict, failure_verdict, goal_progress, step_failure
from env.grid import MOVE_NAMES, step
from env.instance import Instance, as_instance
from env.render import ansi


class MAPFFrozenLakeParallelEnv(ParallelEnv):
    metadata = {"name": "mapf_frozenlake_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(
        self,
        instance: Instance | dict,
        max_steps: int | None = None,
        reward: RewardConfig | None = None,
        render_mode: str | None = None,
    ):
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        self.instance = instance = as_instance(instance)
        self.grid = instance.grid
        self.max_steps = max_steps or 2 * instance.optimal_makespan + instance.size
        self.reward_config = reward or RewardConfig()
        self.render_mode = render_mode
        self.possible_agents = [f"agent_{i}" for i in range(instance.num_agents)]
        self.agents: list[str] = []
        size = instance.size
        length = 4 + 2 * (instance.num_agents - 1) + size * size
        high = max(size - 1, 1)
        self._observation_spaces = {
            a: spaces.Box(low=0, high=high, shape=(length,), dtype=np.int64) for a in self.possible_agents
        }
        self._action_spaces = {a: spaces.Discrete(len(MOVE_NAMES)) for a in self.possible_agents}
        holes = np.zeros((size, size), dtype=np.int64)
        for r, c in instance.holes:
            holes[r, c] = 1
        self._hole_map = holes.reshape(-1)
        self._np_random, _ = seeding.np_random(None)
        self.positions = [tuple(s) for s in instance.starts]
        self.history: list[list[str]] = [[] for _ in self.possible_agents]
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_spaces[agent]

    def _failure(self, category: str, agent: int | None, detail: str, positions: list) -> Verdict:
        """The verdict of an episode that ends in ``category`` with the agents last fault-free at ``positions``."""
        starts, goals = [tuple(s) for s in self.instance.starts], [tuple(g) for g in self.instance.goals]
        progress = goal_progress(self.grid, starts, goals, [tuple(p) for p in positions])
        return failure_verdict(self.instance, category, agent, self.t, detail, progress)

    def _observe(self, i: int) -> np.ndarray:
        others = [c for j, p in enumerate(self.positions) if j != i for c in p]
        own = [*self.positions[i], *self.instance.goals[i]]
        return np.array([*own, *others, *self._hole_map], dtype=np.int64)

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        self.positions = [tuple(s) for s in self.instance.starts]
        self.history = [[] for _ in self.possible_agents]
        self.t = 0
        self.agents = list(self.possible_agents)
        observations = {a: self._observe(i) for i, a in enumerate(self.possible_agents)}
        return observations, {a: {} for a in self.agents}

    def step(self, actions: dict):
        live = list(self.agents)
        if not live:
            raise RuntimeError("step() called on a finished episode; call reset()")
        self.t += 1
        moves = [MOVE_NAMES[int(actions.get(a, MOVE_NAMES.index("WAIT")))] for a in self.possible_agents]
        previous = self.positions
        current = [step(cell, move) for cell, move in zip(previous, moves)]
        for history, move in zip(self.history, moves):
            history.append(move)
        failure = step_failure(self.grid, previous, current)
        info: dict = {"t": self.t}
        if failure is not None:
            category, agent, detail = failure
            done, reward = True, self.reward_config.reward(self._failure(category, agent, detail, previous))
            info["failure"] = category
        else:
            self.positions = current
            done = all(tuple(p) == tuple(g) for p, g in zip(current, self.instance.goals))
            reward = 0.0
            if done:
                verdict = Verdict(
                    self.instance.id,
                    True,
                    self.t <= self.instance.optimal_makespan,
                    False,
                    self.t,
                    None,
                    None,
                    None,
                    None,
                    "",
                )
                reward = self.reward_config.reward(verdict)
                info["optimal"] = verdict.optimal
        truncated = not done and self.t >= self.max_steps
        if truncated:
            info["failure"] = "goal_not_reached"
            reward = self.reward_config.reward(self._failure("goal_not_reached", None, "", self.positions))
        observations = {a: self._observe(i) for i, a in enumerate(self.possible_agents) if a in live}
        if done or truncated:
            self.agents = []
        return (
            observations,
            {a: float(reward) for a in live},
            {a: done for a in live},
            {a: truncated for a in live},
            {a: dict(info) for a in live},
        )

    def render(self):
        if self.render_mode == "ansi":
            return ansi(self.instance, self.history)
        return None

    def state(self) -> np.ndarray:
        return np.array([c for p in self.positions for c in p], dtype=np.int64)

    def close(self) -> None:
        pass


def parallel_env(instance: Instance, **kwargs) -> MAPFFrozenLakeParallelEnv:
    """The PettingZoo environment of one instance."""
    return MAPFFrozenLakeParallelEnv(instance, **kwargs)

"""Evaluator: a response (or plan) on an instance becomes a verdict with a reward.

A plan is executed step by step (agents whose move list has ended stay put). Within a time step the
checks run in the fixed order ``off_grid``, ``hole``, ``vertex_conflict``, ``edge_conflict``; the first
failure found, in time order, is the verdict's failure. ``goal_not_reached`` is checked after the last
step. ``parse_error`` and ``wrong_agents`` come from the prompt codec before any move is made.

Progress (``Verdict.progress``, in [0, 1]): the share of the agents' summed start-to-goal distance (shortest
paths around the holes) that a plan has covered at its last fault-free state: the state before the faulty
step, or the final state when an agent does not reach its goal. 1 for a valid plan, 0 for a plan that cannot
be read; standing still or walking away earns 0. ``RewardConfig.progress`` pays it to invalid plans (off by
default).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict, Field

from env.grid import Cell, Grid, step
from env.instance import Instance
from env.prompt import ParseFailure, parse_response

FAILURE_CATEGORIES = (
    "parse_error",
    "wrong_agents",
    "off_grid",
    "hole",
    "vertex_conflict",
    "edge_conflict",
    "goal_not_reached",
)


class RewardConfig(BaseModel):
    """Reward of a verdict: ``valid`` for a valid plan plus bonuses; ``invalid`` otherwise."""

    model_config = ConfigDict(extra="forbid")

    valid: float = Field(1.0, description="reward of a valid plan")
    optimal_bonus: float = Field(0.5, description="added when the makespan is optimal")
    soc_optimal_bonus: float = Field(0.0, description="added when the sum of costs is optimal")
    invalid: float = Field(0.0, description="reward of an invalid plan, unless its category is listed below")
    failure: dict[str, float] = Field(default_factory=dict, description="reward per failure category")
    progress: float = Field(
        0.0, ge=0.0, lt=1.0, description="an invalid plan also earns this x its progress (0 = off; module doc)"
    )

    def reward(self, verdict: Verdict) -> float:
        if not verdict.valid:
            return self.failure.get(verdict.failure or "", self.invalid) + self.progress * verdict.progress
        return self.valid + self.optimal_bonus * verdict.optimal + self.soc_optimal_bonus * verdict.soc_optimal


@dataclass
class Verdict:
    id: str
    valid: bool
    optimal: bool
    soc_optimal: bool
    makespan: int | None
    sum_of_costs: int | None
    failure: str | None
    failure_agent: int | None
    failure_step: int | None
    detail: str
    reward: float = 0.0
    progress: float = 0.0  # share of the start-to-goal distance covered without a fault (module doc)

    def to_dict(self) -> dict:
        return asdict(self)


def regret(verdict: Verdict, optimal_makespan: int) -> float:
    """How far a plan is from the optimum, from what the exact solver makes known, in [0, 1]: 0 for an
    optimal plan; a valid plan 0.5 x its makespan gap over the optimum (at most 0.5); an invalid plan
    1 - 0.5 x the share of the optimal makespan it got through before its first fault (a plan that cannot be
    read or names the wrong agents: 1)."""
    if verdict.valid:
        gap = (verdict.makespan or 0) - optimal_makespan
        return 0.5 * min(1.0, max(0, gap) / max(1, optimal_makespan))
    if verdict.failure_step is None or verdict.failure in ("parse_error", "wrong_agents"):
        return 1.0
    progress = min(verdict.failure_step - 1, optimal_makespan) / max(1, optimal_makespan)
    return 1.0 - 0.5 * max(0.0, progress)


def failure_verdict(
    instance: Instance, category: str, agent: int | None, t: int | None, detail: str, progress: float = 0.0
) -> Verdict:
    """The verdict of an invalid plan."""
    return Verdict(instance.id, False, False, False, None, None, category, agent, t, detail, progress=progress)


def goal_progress(grid: Grid, starts: list[Cell], goals: list[Cell], positions: list[Cell]) -> float:
    """The share of the summed start-to-goal distance that ``positions`` have covered, in [0, 1]."""
    total = sum(grid.distance(s, g) for s, g in zip(starts, goals))
    if total <= 0:
        return 1.0
    left = sum(grid.distance(p, g) for p, g in zip(positions, goals))
    return min(1.0, max(0.0, 1.0 - left / total))


def _arrival_time(positions: list[Cell], goal: Cell) -> int:
    """Time of the final arrival at ``goal`` (0 if the agent never leaves it)."""
    t = len(positions) - 1
    while t > 0 and positions[t - 1] == goal:
        t -= 1
    return t


def step_failure(grid: Grid, previous: list[Cell], current: list[Cell]) -> tuple[str, int, str] | None:
    """The first rule one joint step breaks, in the fixed order: (category, agent, detail), or None."""
    for i, cell in enumerate(current):
        if not grid.in_bounds(cell):
            return "off_grid", i, f"agent {i} leaves the map at {cell}"
    for i, cell in enumerate(current):
        if not grid.is_free(cell):
            return "hole", i, f"agent {i} falls into the hole at {cell}"
    seen: dict[Cell, int] = {}
    for i, cell in enumerate(current):
        if cell in seen:
            return "vertex_conflict", seen[cell], f"agents {seen[cell]} and {i} meet at {cell}"
        seen[cell] = i
    for i in range(len(current)):
        for j in range(i + 1, len(current)):
            if current[i] == previous[j] and current[j] == previous[i] and current[i] != previous[i]:
                return "edge_conflict", i, f"agents {i} and {j} swap {previous[i]} and {previous[j]}"
    return None


def check_plan(instance: Instance, plan: list[list[str]], grid: Grid | None = None) -> Verdict:
    """Verdict of a parsed plan (one move list per agent); reward left at 0."""
    grid = grid or instance.grid
    starts = [tuple(s) for s in instance.starts]
    goals = [tuple(g) for g in instance.goals]
    if len(plan) != len(starts):
        return failure_verdict(instance, "wrong_agents", None, None, f"{len(plan)} plans for {len(starts)} agents")
    horizon = max((len(m) for m in plan), default=0)
    trajectories = [[s] for s in starts]
    for t in range(1, horizon + 1):
        previous = [tr[-1] for tr in trajectories]
        current = [step(previous[i], plan[i][t - 1]) if t <= len(plan[i]) else previous[i] for i in range(len(plan))]
        failure = step_failure(grid, previous, current)
        if failure is not None:
            category, agent, detail = failure
            return failure_verdict(instance, category, agent, t, detail, goal_progress(grid, starts, goals, previous))
        for trajectory, cell in zip(trajectories, current):
            trajectory.append(cell)
    ends = [trajectory[-1] for trajectory in trajectories]
    for i, (end, goal) in enumerate(zip(ends, goals)):
        if end != goal:
            progress = goal_progress(grid, starts, goals, ends)
            detail = f"agent {i} ends at {end}, not its goal {goal}"
            return failure_verdict(instance, "goal_not_reached", i, horizon, detail, progress)
    costs = [_arrival_time(tr, g) for tr, g in zip(trajectories, goals)]
    makespan, soc = max(costs, default=0), sum(costs)
    return Verdict(
        instance.id,
        True,
        makespan <= instance.optimal_makespan,
        soc <= instance.optimal_sum_of_costs,
        makespan,
        soc,
        None,
        None,
        None,
        "",
        progress=1.0,
    )


def evaluate(instance: Instance, response: str, reward: RewardConfig | None = None) -> Verdict:
    """Verdict of a response text, with its reward."""
    return evaluate_parsed(instance, parse_response(response, instance.num_agents), reward)


def evaluate_parsed(
    instance: Instance, parsed: list[list[str]] | ParseFailure, reward: RewardConfig | None = None
) -> Verdict:
    """Verdict, with its reward, of what ``parse_response`` made of a response."""
    if isinstance(parsed, ParseFailure):
        verdict = failure_verdict(instance, parsed.category, None, None, parsed.detail)
    else:
        verdict = check_plan(instance, parsed)
    verdict.reward = (reward or RewardConfig()).reward(verdict)
    return verdict


def evaluate_batch(
    instances: dict[str, Instance], responses: Iterable[tuple[str, str]], reward: RewardConfig | None = None
) -> list[Verdict]:
    """Verdicts of many ``(instance id, response)`` pairs; an unknown id raises ``KeyError``."""
    reward = reward or RewardConfig()
    verdicts = []
    for instance_id, response in responses:
        if instance_id not in instances:
            raise KeyError(f"no instance with id {instance_id!r}")
        verdicts.append(evaluate(instances[instance_id], response, reward))
    return verdicts

"""Brute-force joint-state searches used as an oracle for the solver on tiny grids."""

from __future__ import annotations

import heapq
import itertools
from collections import deque

from env.grid import MOVES, Cell, Grid


def _joint_successors(grid: Grid, positions: tuple[Cell, ...], movers: tuple[bool, ...], allow_wait: bool):
    """Conflict-free next joint positions; agents with movers[i] False stay put."""
    options = []
    for pos, moving in zip(positions, movers):
        if not moving:
            options.append([pos])
            continue
        cells = [(pos[0] + dr, pos[1] + dc) for name, (dr, dc) in MOVES.items() if allow_wait or name != "WAIT"]
        options.append([c for c in cells if grid.is_free(c)])
    for nxt in itertools.product(*options):
        if len(set(nxt)) < len(nxt):
            continue
        if any(
            nxt[i] == positions[j] and nxt[j] == positions[i] and i != j
            for i in range(len(nxt))
            for j in range(i + 1, len(nxt))
        ):
            continue
        yield nxt


def min_makespan(size: int, holes: list[Cell], starts: list[Cell], goals: list[Cell], horizon: int = 40) -> int | None:
    """Breadth-first search over joint positions; None when no plan within ``horizon``."""
    grid = Grid(size, holes)
    start, goal = tuple(map(tuple, starts)), tuple(map(tuple, goals))
    seen = {start: 0}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state == goal:
            return seen[state]
        if seen[state] >= horizon:
            continue
        for nxt in _joint_successors(grid, state, (True,) * len(state), True):
            if nxt not in seen:
                seen[nxt] = seen[state] + 1
                queue.append(nxt)
    return None


def min_sum_of_costs(
    size: int, holes: list[Cell], starts: list[Cell], goals: list[Cell], allow_wait: bool = True, horizon: int = 40
) -> int | None:
    """Dijkstra over (positions, finished flags, time): an agent may declare itself finished on its
    goal and then stays forever; each step costs the number of unfinished agents."""
    grid = Grid(size, holes)
    goals_t = tuple(map(tuple, goals))
    positions0 = tuple(map(tuple, starts))
    at_goal = [i for i in range(len(starts)) if positions0[i] == goals_t[i]]
    best, heap = {}, []
    for k in range(len(at_goal) + 1):  # agents starting on their goal may finish at once
        for chosen in itertools.combinations(at_goal, k):
            start = (positions0, tuple(i in chosen for i in range(len(starts))))
            best[start] = 0
            heap.append((0, 0, start))
    while heap:
        cost, t, state = heapq.heappop(heap)
        positions, finished = state
        if all(finished):
            return cost
        if cost > best.get(state, cost) or t >= horizon:
            continue
        movers = tuple(not f for f in finished)
        step_cost = sum(movers)
        for nxt in _joint_successors(grid, positions, movers, allow_wait):
            # every subset of agents now on their goal may declare themselves finished
            can_finish = [i for i in range(len(nxt)) if movers[i] and nxt[i] == goals_t[i]]
            for k in range(len(can_finish) + 1):
                for chosen in itertools.combinations(can_finish, k):
                    flags = tuple(finished[i] or i in chosen for i in range(len(nxt)))
                    new_state = (nxt, flags)
                    new_cost = cost + step_cost
                    if new_cost < best.get(new_state, 10**9):
                        best[new_state] = new_cost
                        heapq.heappush(heap, (new_cost, t + 1, new_state))
    return None

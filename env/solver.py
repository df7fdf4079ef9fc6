"""Exact MAPF solver: Conflict-Based Search with its standard improvements.

Rules (shared with the evaluator): agents move UP/DOWN/LEFT/RIGHT or WAIT one cell per time step; no
two agents on one cell at one time (vertex conflict), no two agents swapping cells (edge conflict);
holes and the grid's bounds are walls. An agent stays on its goal after its plan ends and blocks it.
An agent's cost is the time of its final arrival at its goal; the makespan is the largest cost, the
sum of costs the total.

``solve`` runs CBS (Sharon et al. 2015) with prioritised conflicts from MDDs, bypassing and
conflict-avoidance tie-breaking in the low level (ICBS, Boyarski et al. 2015), after a fast path that
returns independent shortest paths when they do not conflict. CBS cannot prove that an instance has no
solution and is slow on a few crowded ones, so where the joint state space is small an exact A* over
joint states (positions and which agents have finished) takes over. Two objectives:

* ``"sum_of_costs"``: minimum sum of costs;
* ``"makespan"``: minimum makespan, and among those the minimum sum of costs (lexicographic). CBS stays
  exact for it because both parts only grow when constraints are added.

Work is bounded by a deterministic budget (low-level expansions and constraint-tree nodes), so the
same instance always gives the same answer on any machine; an optional wall-clock limit is a safety
net for interactive use. ``analyse`` computes everything an instance record needs.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field, replace
from typing import Literal

from env.grid import UNREACHABLE, Cell, Grid, path_to_moves
from env.instance import Instance

Objective = Literal["makespan", "sum_of_costs"]


class SolverError(Exception):
    """Base class of the solver's errors."""


class Unsolvable(SolverError):
    """The instance has no solution (or none within the given cost bound)."""


class BudgetExceeded(SolverError):
    """The solver ran out of its work budget or wall-clock limit before finishing."""


@dataclass(frozen=True)
class SolverLimits:
    """Deterministic work budget of one solve (and an optional wall-clock safety net)."""

    max_expansions: int = 400_000
    max_nodes: int = 20_000
    time_limit_s: float | None = None


@dataclass
class Solution:
    """Per-agent paths (start first, ending on the goal at the agent's final arrival)."""

    paths: list[list[Cell]]
    nodes: int = 0
    expansions: int = 0

    @property
    def costs(self) -> list[int]:
        return [len(p) - 1 for p in self.paths]

    @property
    def makespan(self) -> int:
        return max(self.costs, default=0)

    @property
    def sum_of_costs(self) -> int:
        return sum(self.costs)

    @property
    def moves(self) -> list[list[str]]:
        return [path_to_moves(p) for p in self.paths]

    @property
    def has_wait(self) -> bool:
        """Whether some agent waits before its final arrival."""
        return any(a == b for p in self.paths for a, b in zip(p, p[1:]))


@dataclass
class Analysis:
    """What an instance record needs: optima, the WAIT flag and a minimum-makespan witness."""

    optimal_makespan: int
    optimal_sum_of_costs: int
    requires_wait: bool
    solution: list[list[str]]

    def to_instance(
        self, id: str, size: int, holes: list[Cell], starts: list[Cell], goals: list[Cell], seed: int
    ) -> Instance:
        """The instance record of a layout with this analysis."""
        return Instance(
            id=id,
            size=size,
            holes=holes,
            starts=starts,
            goals=goals,
            optimal_makespan=self.optimal_makespan,
            optimal_sum_of_costs=self.optimal_sum_of_costs,
            requires_wait=self.requires_wait,
            seed=seed,
            solution=self.solution,
        )


# ----------------------------------------------------------------------------------------------
# Low level: space-time A* for one agent under constraints.


@dataclass(frozen=True)
class AgentConstraints:
    """Forbidden (cell, time) visits and (from, to, time) moves of one agent, as packed ints."""

    vertex: frozenset[int] = frozenset()
    edge: frozenset[int] = frozenset()
    goal_free_from: int = 0  # earliest time from which the goal cell is never forbidden

    def with_vertex(self, key: int, is_goal: bool, t: int) -> AgentConstraints:
        goal_free_from = max(self.goal_free_from, t + 1) if is_goal else self.goal_free_from
        return AgentConstraints(self.vertex | {key}, self.edge, goal_free_from)

    def with_edge(self, key: int) -> AgentConstraints:
        return AgentConstraints(self.vertex, self.edge | {key}, self.goal_free_from)


class _Budget:
    def __init__(self, limits: SolverLimits):
        self.limits = limits
        self.expansions = 0
        self.nodes = 0
        self.deadline = None if limits.time_limit_s is None else time.monotonic() + limits.time_limit_s

    def spend(self, expansions: int = 0, nodes: int = 0) -> None:
        self.expansions += expansions
        self.nodes += nodes
        if self.expansions > self.limits.max_expansions or self.nodes > self.limits.max_nodes:
            raise BudgetExceeded(f"solver budget exceeded ({self.expansions} expansions, {self.nodes} nodes)")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise BudgetExceeded(f"solver time limit of {self.limits.time_limit_s} s exceeded")


class _AvoidanceTable:
    """Where the other agents are, to prefer paths with fewer conflicts among equally short ones."""

    def __init__(self, n: int, paths: list[list[int]]):
        self.n = n
        self.vertex: dict[int, int] = {}
        self.edge: dict[int, int] = {}
        self.rest: dict[int, int] = {}  # cell -> time from which an agent rests there
        for path in paths:
            for t, v in enumerate(path):
                key = t * n + v
                self.vertex[key] = self.vertex.get(key, 0) + 1
                if t:
                    ekey = (t * n + path[t - 1]) * n + v
                    self.edge[ekey] = self.edge.get(ekey, 0) + 1
            self.rest[path[-1]] = len(path) - 1


def _low_level(
    grid: Grid,
    start: int,
    goal: int,
    heuristic: list[int],
    constraints: AgentConstraints,
    avoid: _AvoidanceTable | None,
    allow_wait: bool,
    budget: _Budget,
    cost_bound: int | None = None,
) -> list[int] | None:
    """Shortest path under constraints; ties go to fewer conflicts, then fewer waits."""
    n = grid.num_cells
    neighbours = grid.neighbours
    vertex, edge = constraints.vertex, constraints.edge
    goal_from = constraints.goal_free_from
    f0 = max(heuristic[start], goal_from)
    if cost_bound is not None and f0 > cost_bound:
        return None
    avoid_vertex, avoid_edge, avoid_rest = (avoid.vertex, avoid.edge, avoid.rest) if avoid else ({}, {}, {})
    # Heap entries: (f, conflicts, waits, -t, cell, t, parent key). Conflicts with the avoidance table are
    # counted lazily: a node whose f is above the current one is pushed with conflicts -1 (parent's count
    # kept in the parent key's entry) and only evaluated if the search ever reaches its f.
    heap: list[tuple[int, int, int, int, int, int, int, int]] = [(f0, 0, 0, 0, start, 0, -1, 0)]
    parent: dict[int, int] = {}
    expansions = 0
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        f, conflicts, waits, neg_t, v, t, parent_key, parent_conflicts = pop(heap)
        key = t * n + v
        if key in parent:
            continue
        if conflicts < 0:  # evaluate a deferred node now that its f is current
            u = parent_key % n
            conflicts = parent_conflicts + avoid_vertex.get(key, 0) + avoid_edge.get((t * n + v) * n + u, 0)
            rest = avoid_rest.get(v)
            if rest is not None and t > rest:
                conflicts += 1
            push(heap, (f, conflicts, waits, neg_t, v, t, parent_key, 0))
            continue
        parent[key] = parent_key
        expansions += 1
        if expansions % 1024 == 0:
            budget.spend(expansions=1024)
        if v == goal and t >= goal_from:
            budget.spend(expansions=expansions % 1024)
            path = [v]
            while parent[key] >= 0:
                key = parent[key]
                path.append(key % n)
            path.reverse()
            return path
        nt = t + 1
        nt_n = nt * n
        edge_base = (nt_n + v) * n
        successors = neighbours[v] + (v,) if allow_wait else neighbours[v]
        for w in successors:
            nkey = nt_n + w
            if nkey in parent or (vertex and nkey in vertex) or (edge and edge_base + w in edge):
                continue
            nf = nt + heuristic[w]
            if nf < goal_from:
                nf = goal_from
            if cost_bound is not None and nf > cost_bound:
                continue
            if nf > f:
                push(heap, (nf, -1, waits + (w == v), -nt, w, nt, key, conflicts))
                continue
            extra = avoid_vertex.get(nkey, 0) + avoid_edge.get((nt_n + w) * n + v, 0)
            rest = avoid_rest.get(w)
            if rest is not None and nt > rest:
                extra += 1
            push(heap, (nf, conflicts + extra, waits + (w == v), -nt, w, nt, key, 0))
    budget.spend(expansions=expansions % 1024)
    return None


def _mdd_widths(
    grid: Grid,
    path: list[int],
    heuristic: list[int],
    constraints: AgentConstraints,
    allow_wait: bool,
) -> list[frozenset[int]]:
    """Per time step, the cells an agent can occupy on some optimal path (its MDD levels)."""
    n = grid.num_cells
    cost = len(path) - 1
    start, goal = path[0], path[-1]
    neighbours = grid.neighbours
    vertex, edge = constraints.vertex, constraints.edge
    forward: list[set[int]] = [{start}]
    for t in range(1, cost + 1):
        layer = set()
        for v in forward[-1]:
            successors = neighbours[v] + (v,) if allow_wait else neighbours[v]
            for w in successors:
                if t + heuristic[w] <= cost and t * n + w not in vertex and (t * n + v) * n + w not in edge:
                    layer.add(w)
        forward.append(layer)
    levels: list[frozenset[int]] = [frozenset()] * (cost + 1)
    levels[cost] = frozenset({goal} & forward[cost])
    for t in range(cost - 1, -1, -1):
        below = levels[t + 1]
        keep = set()
        for v in forward[t]:
            successors = neighbours[v] + (v,) if allow_wait else neighbours[v]
            if any(w in below and ((t + 1) * n + v) * n + w not in edge for w in successors):
                keep.add(v)
        levels[t] = frozenset(keep)
    return levels


# ----------------------------------------------------------------------------------------------
# High level: the constraint tree.


@dataclass
class _Node:
    paths: list[list[int]]
    constraints: list[AgentConstraints]
    conflicts: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    mdds: list[list[frozenset[int]] | None] = field(default_factory=list)

    def cost(self, objective: Objective) -> tuple[int, ...]:
        costs = [len(p) - 1 for p in self.paths]
        if objective == "makespan":
            return (max(costs), sum(costs))
        return (sum(costs),)


def _pair_conflicts(a: int, b: int, pa: list[int], pb: list[int]) -> list[tuple[int, int, int, int, int]]:
    """All conflicts between two paths: (time, agent a, agent b, cell, previous cell of a or -1)."""
    found = []
    la, lb = len(pa), len(pb)
    prev_a, prev_b = pa[0], pb[0]
    for t in range(max(la, lb)):
        va = pa[t] if t < la else pa[-1]
        vb = pb[t] if t < lb else pb[-1]
        if va == vb:
            found.append((t, a, b, va, -1))
        elif t and va == prev_b and vb == prev_a:
            found.append((t, a, b, va, prev_a))
        prev_a, prev_b = va, vb
    return found


def _all_conflicts(paths: list[list[int]]) -> list[tuple[int, int, int, int, int]]:
    found = []
    for a in range(len(paths)):
        for b in range(a + 1, len(paths)):
            found.extend(_pair_conflicts(a, b, paths[a], paths[b]))
    return found


def _num_conflicting_pairs(conflicts: list[tuple[int, int, int, int, int]]) -> int:
    return len({(c[1], c[2]) for c in conflicts})


@dataclass(frozen=True)
class _Query:
    """One search problem on flat cell indices."""

    grid: Grid
    starts: list[int]
    goals: list[int]
    objective: Objective
    allow_wait: bool
    cost_bound: int | None


class _CBS:
    def __init__(self, query: _Query, budget: _Budget):
        self.grid = query.grid
        self.starts = query.starts
        self.goals = query.goals
        self.objective = query.objective
        self.allow_wait = query.allow_wait
        self.cost_bound = query.cost_bound
        self.budget = budget

    def heuristic(self, agent: int) -> list[int]:
        """Exact distances to the agent's goal (breadth-first from the goal; cached by the grid)."""
        return self.grid.distances_from(self.goals[agent])

    def plan(self, agent: int, constraints: AgentConstraints, others: list[list[int]], bound: int | None):
        avoid = _AvoidanceTable(self.grid.num_cells, others) if others else None
        return _low_level(
            self.grid,
            self.starts[agent],
            self.goals[agent],
            self.heuristic(agent),
            constraints,
            avoid,
            self.allow_wait,
            self.budget,
            bound,
        )

    def agent_bound(self, node: _Node, agent: int) -> int | None:
        """Largest cost the agent may take without pushing the node over the cost bound."""
        if self.cost_bound is None:
            return None
        others = sum(len(p) - 1 for i, p in enumerate(node.paths) if i != agent)
        return self.cost_bound - others

    def mdd(self, node: _Node, agent: int) -> list[frozenset[int]]:
        levels = node.mdds[agent]
        if levels is None:
            levels = _mdd_widths(
                self.grid, node.paths[agent], self.heuristic(agent), node.constraints[agent], self.allow_wait
            )
            node.mdds[agent] = levels
        return levels

    def singleton(self, node: _Node, agent: int, t: int, cell: int) -> bool:
        levels = self.mdd(node, agent)
        if t >= len(levels):
            return True  # resting on its goal
        return levels[t] == frozenset((cell,))

    def cardinality(self, node: _Node, conflict: tuple[int, int, int, int, int]) -> int:
        """2 if both children must cost more, 1 if one must, 0 otherwise."""
        t, a, b, v, u = conflict
        if u < 0:
            return self.singleton(node, a, t, v) + self.singleton(node, b, t, v)
        # a moves u -> v and b moves v -> u at time t
        return (self.singleton(node, a, t - 1, u) and self.singleton(node, a, t, v)) + (
            self.singleton(node, b, t - 1, v) and self.singleton(node, b, t, u)
        )

    def choose(self, node: _Node) -> tuple[int, int, int, int, int]:
        best, best_rank = None, None
        for conflict in node.conflicts:
            rank = (-self.cardinality(node, conflict), conflict[0])
            if best_rank is None or rank < best_rank:
                best, best_rank = conflict, rank
                if rank[0] == -2:
                    break
        return best

    def child(self, node: _Node, agent: int, constraints: AgentConstraints) -> _Node | None:
        others = [p for i, p in enumerate(node.paths) if i != agent]
        path = self.plan(agent, constraints, others, self.agent_bound(node, agent))
        if path is None:
            return None
        paths = list(node.paths)
        paths[agent] = path
        all_constraints = list(node.constraints)
        all_constraints[agent] = constraints
        mdds = list(node.mdds)
        mdds[agent] = None
        return _Node(paths, all_constraints, _all_conflicts(paths), mdds)

    def split(self, node: _Node, conflict: tuple[int, int, int, int, int]) -> list[tuple[int, AgentConstraints]]:
        t, a, b, v, u = conflict
        n = self.grid.num_cells
        if u < 0:
            return [
                (agent, node.constraints[agent].with_vertex(t * n + v, v == self.goals[agent], t)) for agent in (a, b)
            ]
        return [
            (a, node.constraints[a].with_edge((t * n + u) * n + v)),
            (b, node.constraints[b].with_edge((t * n + v) * n + u)),
        ]

    def run(self) -> list[list[int]]:
        agents = range(len(self.starts))
        # Fast path: independent shortest paths that happen not to conflict are optimal for both objectives.
        independent = []
        for agent in agents:
            path = self.grid.shortest_path(self.starts[agent], self.goals[agent])
            if path is None:
                raise Unsolvable(f"agent {agent} cannot reach its goal")
            independent.append(path)
        conflicts = _all_conflicts(independent)
        if not conflicts:
            if self.cost_bound is not None and sum(len(p) - 1 for p in independent) > self.cost_bound:
                raise Unsolvable("no solution within the cost bound")
            return independent
        # Root: replan the agents in conflict, one by one, preferring paths that avoid the others.
        root = _Node(independent, [AgentConstraints() for _ in agents], [], [None for _ in agents])
        for agent in sorted({c[1] for c in conflicts} | {c[2] for c in conflicts}):
            others = [p for i, p in enumerate(root.paths) if i != agent]
            root.paths[agent] = self.plan(agent, root.constraints[agent], others, None)
        root.conflicts = _all_conflicts(root.paths)
        if self.cost_bound is not None and root.cost(self.objective)[-1] > self.cost_bound:
            raise Unsolvable("no solution within the cost bound")
        counter = 0
        open_list = [(root.cost(self.objective), _num_conflicting_pairs(root.conflicts), counter, root)]
        while open_list:
            cost, _, _, node = heapq.heappop(open_list)
            self.budget.spend(nodes=1)
            while node.conflicts:
                conflict = self.choose(node)
                children = []
                bypassed = False
                for agent, constraints in self.split(node, conflict):
                    child = self.child(node, agent, constraints)
                    if child is None:
                        continue
                    if child.cost(self.objective) == cost and len(child.conflicts) < len(node.conflicts):
                        node.paths[agent] = child.paths[agent]
                        node.mdds[agent] = None
                        node.conflicts = child.conflicts
                        bypassed = True
                        break
                    children.append(child)
                if bypassed:
                    continue
                for child in children:
                    counter += 1
                    heapq.heappush(
                        open_list,
                        (child.cost(self.objective), _num_conflicting_pairs(child.conflicts), counter, child),
                    )
                break
            else:
                return node.paths
        raise Unsolvable(
            "the constraint tree is exhausted: no solution"
            + (" within the cost bound" if self.cost_bound is not None else "")
        )


FIRST_SEARCH_NODES = 64
JOINT_FIRST_WORK = 3_000
JOINT_MAX_WORK = 400_000


def _joint_work(grid: Grid, num_agents: int) -> int:
    """Joint states times joint moves: the size of a reachability check over joint positions."""
    free = sum(grid.free)
    states = 1
    for i in range(num_agents):
        states *= max(free - i, 0)
    return states * 5**num_agents


def _joint_search(query: _Query, budget: _Budget) -> list[list[int]]:
    """Exact A* over joint states (positions, which agents have finished): for small joint spaces.

    An agent on its goal may declare itself finished and then rests there for good; every step costs
    each unfinished agent 1 (and the makespan 1). The cost is (sum of costs,) or (makespan, sum of
    costs); the heuristic adds each unfinished agent's distance to its goal. Proves unsolvability by
    exhausting the (finite) state space."""
    grid, starts, goals, objective = query.grid, query.starts, query.goals, query.objective
    allow_wait, cost_bound = query.allow_wait, query.cost_bound
    k = len(starts)
    neighbours = grid.neighbours
    dist = [grid.distances_from(g) for g in goals]
    for i in range(k):
        if dist[i][starts[i]] >= UNREACHABLE:
            raise Unsolvable(f"agent {i} cannot reach its goal")

    def heuristic(positions: tuple[int, ...], finished: tuple[bool, ...]) -> tuple[int, ...]:
        left = [dist[i][positions[i]] for i in range(k) if not finished[i]]
        return (max(left, default=0), sum(left)) if objective == "makespan" else (sum(left),)

    def finishing(positions: tuple[int, ...], finished: tuple[bool, ...]):
        """Every choice of which unfinished agents standing on their goals finish now."""
        can = [i for i in range(k) if not finished[i] and positions[i] == goals[i]]
        for m in range(len(can) + 1):
            for chosen in itertools.combinations(can, m):
                yield tuple(finished[i] or i in chosen for i in range(k))

    def add(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(x + y for x, y in zip(a, b))

    zero = (0, 0) if objective == "makespan" else (0,)
    best: dict = {}
    came_from: dict = {}
    heap: list = []
    counter = itertools.count()
    for flags in finishing(tuple(starts), (False,) * k):
        state = (tuple(starts), flags)
        best[state] = zero
        came_from[state] = None
        heapq.heappush(heap, (add(zero, heuristic(*state)), zero, next(counter), state))
    while heap:
        _, g, _, state = heapq.heappop(heap)
        if g != best[state]:
            continue
        positions, finished = state
        if all(finished):
            return _joint_paths(state, came_from, k)
        budget.spend(expansions=1)
        unfinished = k - sum(finished)
        step_cost = (1, unfinished) if objective == "makespan" else (unfinished,)
        new_g = add(g, step_cost)
        options = [
            (v,) if finished[i] else (neighbours[v] + (v,) if allow_wait else neighbours[v])
            for i, v in enumerate(positions)
        ]
        for nxt in itertools.product(*options):
            if len(set(nxt)) < k or any(
                nxt[a] == positions[b] and nxt[b] == positions[a] for a in range(k) for b in range(a + 1, k)
            ):
                continue
            for flags in finishing(nxt, finished):
                child = (nxt, flags)
                f = add(new_g, heuristic(nxt, flags))
                if cost_bound is not None and f[-1] > cost_bound:
                    continue
                if child not in best or new_g < best[child]:
                    best[child] = new_g
                    came_from[child] = state
                    heapq.heappush(heap, (f, new_g, next(counter), child))
    raise Unsolvable("no solution" + (" within the cost bound" if cost_bound is not None else ""))


def _joint_paths(state, came_from: dict, k: int) -> list[list[int]]:
    """Per-agent paths from a chain of joint states, each cut at the agent's finishing time."""
    chain = []
    while state is not None:
        chain.append(state)
        state = came_from[state]
    chain.reverse()
    paths = []
    for i in range(k):
        finish = next(t for t, (_, flags) in enumerate(chain) if flags[i])
        paths.append([positions[i] for positions, _ in chain[: finish + 1]])
    return paths


def _check_instance(grid: Grid, starts: list[Cell], goals: list[Cell]) -> None:
    if len(starts) != len(goals):
        raise Unsolvable(f"{len(starts)} starts but {len(goals)} goals")
    for name, cells in (("start", starts), ("goal", goals)):
        for i, cell in enumerate(cells):
            if not grid.is_free(cell):
                raise Unsolvable(f"agent {i}'s {name} {cell} is off the grid or in a hole")
        if len(set(cells)) != len(cells):
            raise Unsolvable(f"two agents share a {name} cell")


def solve(
    size: int,
    holes: list[Cell],
    starts: list[Cell],
    goals: list[Cell],
    objective: Objective = "sum_of_costs",
    *,
    allow_wait: bool = True,
    cost_bound: int | None = None,
    limits: SolverLimits = SolverLimits(),
    grid: Grid | None = None,
    method: Literal["auto", "cbs", "joint"] = "auto",
) -> Solution:
    """Optimal conflict-free paths for every agent.

    ``method``: ``"cbs"``, ``"joint"`` (A* over joint states; small instances only) or ``"auto"``
    (joint search where the joint space is tiny or CBS is slow on a small one, CBS otherwise).

    ``allow_wait=False`` forbids WAIT before an agent's final arrival. ``cost_bound`` (sum of costs)
    prunes costlier plans; ``Unsolvable`` is raised when none is left. Raises ``BudgetExceeded`` when
    ``limits`` run out: the answer is then unknown, never approximate.
    """
    grid = grid or Grid(size, holes)
    starts = [tuple(s) for s in starts]
    goals = [tuple(g) for g in goals]
    _check_instance(grid, starts, goals)
    flat_starts, flat_goals = [grid.index(s) for s in starts], [grid.index(g) for g in goals]

    query = _Query(grid, flat_starts, flat_goals, objective, allow_wait, cost_bound)

    def cbs(search_limits: SolverLimits) -> tuple[list[list[int]], _Budget]:
        budget = _Budget(search_limits)
        return _CBS(query, budget).run(), budget

    def joint() -> tuple[list[list[int]], _Budget]:
        budget = _Budget(limits)
        return _joint_search(query, budget), budget

    # CBS cannot prove that an instance has no solution and is slow on a few crowded ones; where the
    # joint state space is tiny the joint search runs instead, and where it is small it takes over
    # once a short first CBS has not found a plan.
    work = _joint_work(grid, len(starts))
    if method == "joint" or (method == "auto" and work <= JOINT_FIRST_WORK):
        flat_paths, budget = joint()
    elif method == "auto" and work <= JOINT_MAX_WORK and limits.max_nodes > FIRST_SEARCH_NODES:
        try:
            flat_paths, budget = cbs(replace(limits, max_nodes=FIRST_SEARCH_NODES))
        except BudgetExceeded:
            flat_paths, budget = joint()
    else:
        flat_paths, budget = cbs(limits)
    paths = [[grid.cell(v) for v in p] for p in flat_paths]
    return Solution(paths, nodes=budget.nodes, expansions=budget.expansions)


def analyse(
    size: int,
    holes: list[Cell],
    starts: list[Cell],
    goals: list[Cell],
    limits: SolverLimits = SolverLimits(),
) -> Analysis:
    """Optimal makespan and sum of costs, the WAIT flag and a minimum-makespan witness plan.

    ``requires_wait`` is true when no plan of minimum sum of costs exists with WAIT forbidden before
    every agent's final arrival. Each of the (up to three) searches gets ``limits`` of its own.
    """
    grid = Grid(size, holes)
    by_cost = solve(size, holes, starts, goals, "sum_of_costs", limits=limits, grid=grid)
    lower_bound = max(grid.distance(tuple(s), tuple(g)) for s, g in zip(starts, goals))
    if by_cost.makespan == lower_bound:
        by_makespan = by_cost  # also makespan-optimal, and of least sum of costs among those
    else:
        by_makespan = solve(size, holes, starts, goals, "makespan", limits=limits, grid=grid)
    requires_wait = False
    if by_cost.has_wait:
        try:
            solve(
                size,
                holes,
                starts,
                goals,
                "sum_of_costs",
                allow_wait=False,
                cost_bound=by_cost.sum_of_costs,
                limits=limits,
                grid=grid,
            )
        except Unsolvable:
            requires_wait = True
    return Analysis(
        optimal_makespan=by_makespan.makespan,
        optimal_sum_of_costs=by_cost.sum_of_costs,
        requires_wait=requires_wait,
        solution=by_makespan.moves,
    )

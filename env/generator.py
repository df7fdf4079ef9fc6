"""Environment generator: an ``EnvConfig`` becomes seeded, solved, solvable instances.

Every instance has its own seed, derived from (config seed, size, index), so instances do not depend on
each other and the same config gives byte-identical output, sequentially or in parallel. Each instance is
drawn until the solver confirms it (and, when the config asks for one, that it needs a WAIT); what cannot
be honoured within a bounded number of draws is recorded as a shortfall, never a hang.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

from env.config import EnvConfig, count_with_ratio, free_cells, min_free_cells
from env.grid import UNREACHABLE, Cell, Grid
from env.instance import Instance
from env.solver import SolverError, SolverLimits, analyse

# Generation uses a smaller budget than the default: a draw that is hard to solve is cheaper to redraw.
GENERATOR_LIMITS = SolverLimits(max_expansions=100_000, max_nodes=4_000)
MAX_DRAWS = {True: 400, False: 100}  # per instance, by whether it must need a WAIT
# Of the draws for a WAIT instance: the share that puts two agents on straight crossing corridors, and
# the share (including those) that aims two agents' shortest paths at one cell at one time.
STRAIGHT_SHARE = 0.4
CROSSING_SHARE = 0.8


class GenerationError(ValueError):
    """A request the generator cannot honour at all."""


def derive_seed(*parts: object) -> int:
    """A stable 32-bit seed from any parts (same parts, same seed, on every machine and Python)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")


@dataclass(frozen=True)
class InstanceSpec:
    """Everything that determines one instance."""

    id: str
    size: int
    num_agents: int
    hole_ratio: float
    want_wait: bool
    seed: int


@dataclass
class DrawResult:
    instance: Instance | None
    draws: int = 0
    unsolved: int = 0  # draws the solver could not finish (budget) or proved unsolvable
    wait_shortfall: bool = False  # asked for a WAIT instance, got one without


@dataclass
class SizeReport:
    size: int
    requested: int = 0
    produced: int = 0
    wait_requested: int = 0
    wait_produced: int = 0
    draws: int = 0
    unsolved: int = 0
    skipped: int = 0  # instances that could not be produced at all


@dataclass
class GenerationReport:
    sizes: dict[int, SizeReport] = field(default_factory=dict)

    @property
    def shortfalls(self) -> list[str]:
        lines = []
        for r in self.sizes.values():
            if r.wait_produced < r.wait_requested:
                lines.append(f"size {r.size}: {r.wait_produced} of {r.wait_requested} WAIT instances")
            if r.skipped:
                lines.append(f"size {r.size}: {r.skipped} of {r.requested} instances skipped (no solvable draw)")
        return lines

    def to_dict(self) -> dict:
        return {"sizes": {s: asdict(r) for s, r in self.sizes.items()}, "shortfalls": self.shortfalls}


def _sample_holes(rng: random.Random, size: int, hole_ratio: float) -> list[Cell]:
    cells = [(r, c) for r in range(size) for c in range(size)]
    count = size * size - free_cells(size, hole_ratio)
    return sorted(rng.sample(cells, count))


def _shortest_path(rng: random.Random, grid: Grid, start: Cell, goal: Cell) -> list[Cell]:
    """One shortest path, chosen at random among the shortest."""
    dist = grid.distances_from(grid.index(goal))
    path, v = [start], grid.index(start)
    while dist[v]:
        v = rng.choice([w for w in grid.neighbours[v] if dist[w] == dist[v] - 1])
        path.append(grid.cell(v))
    return path


def _random_pair(rng: random.Random, grid: Grid, free: list[Cell], taken_starts: set, taken_goals: set):
    start = rng.choice([c for c in free if c not in taken_starts])
    component = grid.distances_from(grid.index(start))
    goals = [c for c in free if c not in taken_goals and c != start and component[grid.index(c)] < UNREACHABLE]
    return (start, rng.choice(goals)) if goals else None


def _crossing_pair(rng: random.Random, grid: Grid, free: list[Cell], first: tuple[Cell, Cell]):
    """A start and goal for a second agent whose shortest paths meet the first agent's at one cell
    at the same time, so that one of them likely has to WAIT."""
    path = _shortest_path(rng, grid, *first)
    if len(path) < 3:
        return None
    t = rng.randrange(1, len(path) - 1)
    meet = grid.index(path[t])
    from_meet = grid.distances_from(meet)
    starts = [c for c in free if from_meet[grid.index(c)] == t and c != first[0]]
    if not starts:
        return None
    start = rng.choice(starts)
    from_start = grid.distances_from(grid.index(start))
    goals = [
        c
        for c in free
        if c not in (first[1], start)
        and from_meet[grid.index(c)] >= 1
        and from_start[grid.index(c)] == t + from_meet[grid.index(c)]
    ]
    return (start, rng.choice(goals)) if goals else None


def _straight_crossing(rng: random.Random, grid: Grid, tries: int = 8):
    """Two agents on straight, perpendicular corridors through one cell, reaching it at the same time.

    Straight lines are their only shortest paths, so on an open map one of them must WAIT."""
    for _ in range(tries):
        (mr, mc), t = rng.choice(grid.free_cells()), rng.randint(1, grid.size - 1)
        d0, d1 = rng.choice((-1, 1)), rng.choice((-1, 1))
        k0, k1 = rng.randint(1, grid.size - 1), rng.randint(1, grid.size - 1)
        row = [(mr, mc + d0 * j) for j in range(-t, k0 + 1)]
        col = [(mr + d1 * j, mc) for j in range(-t, k1 + 1)]
        if all(grid.is_free(c) for c in row + col):
            return [(row[0], row[-1]), (col[0], col[-1])]
    return None


def _draw(rng: random.Random, spec: InstanceSpec) -> tuple[list[Cell], list[Cell], list[Cell]] | None:
    """One random layout: holes, starts and goals, every goal reachable from its start.

    For a WAIT instance the first two agents are usually aimed at one cell at one time."""
    holes = _sample_holes(rng, spec.size, spec.hole_ratio)
    grid = Grid(spec.size, holes)
    free = grid.free_cells()
    pairs: list[tuple[Cell, Cell]] = []
    aim = rng.random() if spec.want_wait and spec.num_agents >= 2 else 1.0
    if aim < STRAIGHT_SHARE:
        pairs = _straight_crossing(rng, grid) or []
    while len(pairs) < spec.num_agents:
        starts, goals = {p[0] for p in pairs}, {p[1] for p in pairs}
        pair = None
        if len(pairs) == 1 and aim < CROSSING_SHARE:
            pair = _crossing_pair(rng, grid, free, pairs[0])
            if pair and (pair[0] in starts or pair[1] in goals):
                pair = None
        if pair is None:
            pair = _random_pair(rng, grid, free, starts, goals)
        if pair is None:
            return None
        pairs.append(pair)
    return holes, [p[0] for p in pairs], [p[1] for p in pairs]


def make_instance(spec: InstanceSpec, limits: SolverLimits = GENERATOR_LIMITS) -> DrawResult:
    """Draw until the solver confirms a solvable layout of the requested kind (bounded)."""
    if free_cells(spec.size, spec.hole_ratio) < min_free_cells(spec.num_agents):
        raise GenerationError(
            f"size {spec.size} with hole_ratio {spec.hole_ratio} has too few free cells for {spec.num_agents} agents"
        )
    rng = random.Random(spec.seed)
    result = DrawResult(None)
    fallback = None
    for _ in range(MAX_DRAWS[spec.want_wait]):
        result.draws += 1
        layout = _draw(rng, spec)
        if layout is None:
            continue
        holes, starts, goals = layout
        try:
            analysis = analyse(spec.size, holes, starts, goals, limits)
        except SolverError:
            result.unsolved += 1
            continue
        instance = analysis.to_instance(spec.id, spec.size, holes, starts, goals, spec.seed)
        if analysis.requires_wait == spec.want_wait:
            result.instance = instance
            return result
        fallback = fallback or instance
    result.instance = fallback
    result.wait_shortfall = spec.want_wait and fallback is not None
    return result


def mutate(instance: Instance, rng: random.Random, new_id: str, limits: SolverLimits = GENERATOR_LIMITS,
           tries: int = 8) -> Instance | None:  # fmt: skip
    """An ACCEL-style edit of ``instance``: toggle one hole (add one on a free cell, or remove one) or move one
    goal to a free cell, re-solved so that the mutant is solvable with a known optimum; None if ``tries``
    edits all fail (unsolvable, or beyond the solver's budget)."""
    starts = [tuple(c) for c in instance.starts]
    for _ in range(tries):
        holes, goals = [tuple(c) for c in instance.holes], [tuple(c) for c in instance.goals]
        taken = set(starts) | set(goals)
        free = [c for c in Grid(instance.size, holes).free_cells() if c not in taken]
        if rng.random() < 0.5:  # toggle a hole
            if holes and (not free or rng.random() < 0.5):
                holes.remove(rng.choice(holes))
            elif free:
                holes.append(rng.choice(free))
        elif free:  # move a goal
            goals[rng.randrange(len(goals))] = rng.choice(free)
        holes = sorted(holes)
        if (holes, goals) == (sorted(tuple(c) for c in instance.holes), [tuple(c) for c in instance.goals]):
            continue
        try:
            analysis = analyse(instance.size, holes, starts, goals, limits)
        except SolverError:
            continue
        return analysis.to_instance(new_id, instance.size, holes, starts, goals, instance.seed)
    return None


def instance_specs(config: EnvConfig, id_prefix: str = "train") -> list[InstanceSpec]:
    """The specs of a round's instances, sizes ascending; WAIT instances spread at random within a size."""
    specs = []
    for size, count in config.instance_counts().items():
        knobs = config.sizes[size]
        waits = count_with_ratio(count, knobs.wait_ratio)
        flags = [True] * waits + [False] * (count - waits)
        random.Random(derive_seed(config.seed, size, "wait-order")).shuffle(flags)
        for index, want_wait in enumerate(flags):
            specs.append(
                InstanceSpec(
                    id=f"{id_prefix}-s{size}-{index:05d}",
                    size=size,
                    num_agents=config.num_agents,
                    hole_ratio=knobs.hole_ratio,
                    want_wait=want_wait,
                    seed=derive_seed(config.seed, size, index),
                )
            )
    return specs


def sample_specs(config: EnvConfig, count: int, *seed_parts: object, id_prefix: str = "rollout") -> list[InstanceSpec]:
    """``count`` specs drawn from ``config``'s distribution (size by data ratio, WAIT by wait ratio), seeded
    by (config seed, *seed_parts): the same parts give the same specs, e.g. (round, step, worker)."""
    rng = random.Random(derive_seed(config.seed, *seed_parts))
    sizes = [s for s, k in config.sizes.items() if k.data_ratio > 0]
    weights = [config.sizes[s].data_ratio for s in sizes]
    tag = "-".join(map(str, seed_parts))
    specs = []
    for index in range(count):
        size = rng.choices(sizes, weights)[0]
        knobs = config.sizes[size]
        specs.append(
            InstanceSpec(
                id=f"{id_prefix}-{tag}-{index:04d}",
                size=size,
                num_agents=config.num_agents,
                hole_ratio=knobs.hole_ratio,
                want_wait=rng.random() < knobs.wait_ratio,
                seed=rng.getrandbits(32),
            )
        )
    return specs


def make_instances(
    specs: list[InstanceSpec], workers: int = 1, progress: Callable[[Iterable], Iterable] | None = None
) -> list[DrawResult]:
    """Produce the instances of ``specs`` in order, in ``workers`` processes (same output for any count)."""
    if workers <= 1:
        results: Iterable[DrawResult] = map(make_instance, specs)
        return list(progress(results) if progress else results)
    with ProcessPoolExecutor(workers) as pool:
        results = pool.map(make_instance, specs, chunksize=max(1, len(specs) // (workers * 16)))
        return list(progress(results) if progress else results)


def generate(
    config: EnvConfig, id_prefix: str = "train", workers: int = 1, progress=None
) -> tuple[list[Instance], GenerationReport]:
    """A round's instances for ``config`` and a report of what could not be honoured."""
    specs = instance_specs(config, id_prefix)
    results = make_instances(specs, workers, progress)
    report = GenerationReport({s: SizeReport(size=s) for s in config.sizes})
    instances = []
    for spec, result in zip(specs, results):
        row = report.sizes[spec.size]
        row.requested += 1
        row.wait_requested += spec.want_wait
        row.draws += result.draws
        row.unsolved += result.unsolved
        if result.instance is None:
            row.skipped += 1
            continue
        row.produced += 1
        row.wait_produced += result.instance.requires_wait
        instances.append(result.instance)
    return instances, report

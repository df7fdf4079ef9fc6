"""Grid geometry shared by the solver, generator, evaluator and environments.

Cells are ``(row, col)`` with (0, 0) at the top left; UP is row - 1. Internally the solver works on
flat indices ``row * size + col``.
"""

from __future__ import annotations

from collections import deque
from functools import cached_property

Cell = tuple[int, int]

MOVES: dict[str, Cell] = {
    "UP": (-1, 0),
    "DOWN": (1, 0),
    "LEFT": (0, -1),
    "RIGHT": (0, 1),
    "WAIT": (0, 0),
}
MOVE_NAMES: tuple[str, ...] = tuple(MOVES)
UNREACHABLE = 10**9


def step(cell: Cell, move: str) -> Cell:
    """The cell reached from ``cell`` by ``move`` (may be off the grid)."""
    dr, dc = MOVES[move]
    return (cell[0] + dr, cell[1] + dc)


def move_between(a: Cell, b: Cell) -> str:
    """The move that takes an agent from ``a`` to the adjacent (or same) cell ``b``."""
    delta = (b[0] - a[0], b[1] - a[1])
    for name, d in MOVES.items():
        if d == delta:
            return name
    raise ValueError(f"cells {a} and {b} are not adjacent")


def path_to_moves(path: list[Cell]) -> list[str]:
    """Turn a list of visited cells (start first) into a list of moves."""
    return [move_between(a, b) for a, b in zip(path, path[1:])]


def moves_to_path(start: Cell, moves: list[str]) -> list[Cell]:
    """Cells visited by following ``moves`` from ``start`` (start first; no bounds checks)."""
    path = [start]
    for move in moves:
        path.append(step(path[-1], move))
    return path


class Grid:
    """A square map with holes: bounds, passability, neighbours and shortest distances."""

    def __init__(self, size: int, holes: list[Cell] | set[Cell] | frozenset[Cell]):
        self.size = size
        self.holes = frozenset(tuple(h) for h in holes)
        self.free = [(r, c) not in self.holes for r in range(size) for c in range(size)]
        self._distances: dict[int, list[int]] = {}

    @property
    def num_cells(self) -> int:
        return self.size * self.size

    def index(self, cell: Cell) -> int:
        return cell[0] * self.size + cell[1]

    def cell(self, index: int) -> Cell:
        return divmod(index, self.size)

    def in_bounds(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.size and 0 <= cell[1] < self.size

    def is_free(self, cell: Cell) -> bool:
        return self.in_bounds(cell) and self.free[self.index(cell)]

    def free_cells(self) -> list[Cell]:
        return [self.cell(i) for i, ok in enumerate(self.free) if ok]

    @cached_property
    def neighbours(self) -> list[tuple[int, ...]]:
        """For each flat index, the free flat indices one move away (WAIT excluded)."""
        result = []
        s = self.size
        for i in range(s * s):
            r, c = divmod(i, s)
            adjacent = []
            if self.free[i]:
                for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                    rr, cc = r + dr, c + dc
                    if 0 <= rr < s and 0 <= cc < s and self.free[rr * s + cc]:
                        adjacent.append(rr * s + cc)
            result.append(tuple(adjacent))
        return result

    def distances_from(self, source: int) -> list[int]:
        """Breadth-first distances (in moves) from flat index ``source``; cached per source."""
        cached = self._distances.get(source)
        if cached is not None:
            return cached
        dist = [UNREACHABLE] * self.num_cells
        dist[source] = 0
        queue = deque([source])
        neighbours = self.neighbours
        while queue:
            v = queue.popleft()
            for w in neighbours[v]:
                if dist[w] == UNREACHABLE:
                    dist[w] = dist[v] + 1
                    queue.append(w)
        self._distances[source] = dist
        return dist

    def distance(self, a: Cell, b: Cell) -> int:
        return self.distances_from(self.index(b))[self.index(a)]

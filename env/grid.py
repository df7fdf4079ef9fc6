"""Grid geometry shared by the solver, generator, evaluator and environments.

Cells are ``(row, col)`` with (0, 0) at the top left; UP is row - 1. Internally the solver works on
flat indices ``row * size + col``.
"""

from __future__ import annotations

from functools import cache, cached_property

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


@cache
def _open_neighbours(size: int) -> tuple[tuple[int, ...], ...]:
    """Neighbours (UP, DOWN, LEFT, RIGHT order) of every flat index on a map without holes."""
    table = []
    for i in range(size * size):
        r, c = divmod(i, size)
        adjacent = []
        if r > 0:
            adjacent.append(i - size)
        if r < size - 1:
            adjacent.append(i + size)
        if c > 0:
            adjacent.append(i - 1)
        if c < size - 1:
            adjacent.append(i + 1)
        table.append(tuple(adjacent))
    return tuple(table)


class Grid:
    """A square map with holes: bounds, passability, neighbours and shortest distances."""

    def __init__(self, size: int, holes: list[Cell] | set[Cell] | frozenset[Cell]):
        self.size = size
        self.holes = frozenset(tuple(h) for h in holes)
        self.free = [True] * (size * size)
        for r, c in self.holes:
            if not (0 <= r < size and 0 <= c < size):
                raise ValueError(f"hole {(r, c)} is outside the {size}x{size} grid")
            self.free[r * size + c] = False
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
        """For each flat index, the free flat indices one move away (WAIT excluded); none for a hole.

        Starts from the hole-free table of this size and patches only the cells next to holes."""
        table = list(_open_neighbours(self.size))
        free = self.free
        blocked = [i for i, ok in enumerate(free) if not ok]
        touched = set()
        for b in blocked:
            touched.update(table[b])
            table[b] = ()
        for v in touched:
            if free[v]:
                table[v] = tuple([w for w in table[v] if free[w]])
        return table

    def _breadth_first(self, source: int, target: int | None = None) -> tuple[list[int], list[int]]:
        """Breadth-first search from ``source``: the parent of every reached cell (-1 for the source, -2
        if not reached) and the cells in the order reached. Stops once ``target`` is reached."""
        came_from = [-2] * self.num_cells
        came_from[source] = -1
        order, neighbours = [source], self.neighbours
        for v in order:
            if target is not None and came_from[target] != -2:
                break
            for w in neighbours[v]:
                if came_from[w] == -2:
                    came_from[w] = v
                    order.append(w)
        return came_from, order

    def distances_from(self, source: int) -> list[int]:
        """Breadth-first distances (in moves) from flat index ``source``; cached per source."""
        dist = self._distances.get(source)
        if dist is None:
            came_from, order = self._breadth_first(source)
            dist = [UNREACHABLE] * self.num_cells
            dist[source] = 0
            for v in order[1:]:
                dist[v] = dist[came_from[v]] + 1
            self._distances[source] = dist
        return dist

    def shortest_path(self, source: int, target: int) -> list[int] | None:
        """One shortest path of flat indices from ``source`` to ``target`` (None if unreachable).

        Stops the search at the target: cheaper than a full distance map."""
        came_from, _ = self._breadth_first(source, target)
        if came_from[target] == -2:
            return None
        path = [target]
        while came_from[path[-1]] >= 0:
            path.append(came_from[path[-1]])
        return path[::-1]

    def distance(self, a: Cell, b: Cell) -> int:
        return self.distances_from(self.index(b))[self.index(a)]

"""Two policies' greedy scores on the same suite instances, paired instance by instance.

A difference in the paper's Sum can be instance noise: two policies that each solve about a quarter of the
benchmark differ on a few hundred instances either way. The paired view counts, per agent count, the
instances the second policy solves and the first does not (gained) and the reverse (lost), and gives the
exact McNemar p-value of that split: how likely a split at least this uneven would be if each changed
instance were equally likely to go either way (instance noise only; a new seed of the same training run is
another source of spread this does not see).

Reads the JSON that ``envengineer eval --out`` writes (a verdict per instance), a run's benchmark record
(``final/benchmark.json``, and ``start/final/benchmark.json`` for its starting policy: the ids scored and
solved) and the records of ``python -m tune.rescore`` (the ids each policy solved, on the suite's first
``per_cell`` instances a cell).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Set
from dataclasses import dataclass
from pathlib import Path

from env.benchmark import SUITES, parse_id
from env.evaluate import Verdict
from env.markdown import md_head, md_row


class CompareError(ValueError):
    """A file that is not a scored record, or two records of different instances."""


@dataclass(frozen=True)
class Scored:
    """One policy's greedy results: which suite instances were scored, which it solved (valid, optimal)."""

    label: str
    scored: frozenset[str]
    valid: frozenset[str]
    optimal: frozenset[str]


@dataclass(frozen=True)
class PairedRow:
    """One agent count (or one map size of it, or one hole level of it): both policies' Sums (acc./opt., % as
    in the paper's table; for a size, its rates; for a hole level, the Sum over sizes of those instances) and
    the paired splits."""

    agents: int
    size: int | None  # None: all sizes
    instances: int
    first: tuple[float, float]  # (acc., opt.) of the first policy
    second: tuple[float, float]
    valid: tuple[int, int]  # (gained, lost): solved by the second and not the first, and the reverse
    optimal: tuple[int, int]
    holes: float | None = None  # the instances drawn with this hole ratio (None: all)

    @property
    def valid_p(self) -> float:
        return mcnemar_p(*self.valid)

    @property
    def optimal_p(self) -> float:
        return mcnemar_p(*self.optimal)


def mcnemar_p(gained: int, lost: int) -> float:
    """Exact two-sided McNemar p-value: how likely a split at least this uneven of the instances that changed
    would be if gaining and losing one were equally likely (a binomial test at 1/2)."""
    changed = gained + lost
    if changed == 0:
        return 1.0
    tail = sum(math.comb(changed, k) for k in range(min(gained, lost) + 1)) / 2**changed
    return min(1.0, 2 * tail)


def solved_ids(verdicts: Iterable[Verdict]) -> dict[str, list[str]]:
    """The ids a policy solved, valid and optimal, sorted: what a scored record keeps beside its table (a run's
    ``benchmark.json``, a ``tune.rescore`` record) so that it can be paired."""
    verdicts = list(verdicts)
    return {"valid": sorted(v.id for v in verdicts if v.valid), "optimal": sorted(v.id for v in verdicts if v.optimal)}


def cell_ids(ids: Set[str], agents: int, size: int | None = None, holes: float | None = None) -> set[str]:
    """The ids with ``agents`` agents (on ``size`` x ``size`` maps, drawn with hole ratio ``holes``, if given)."""
    return {
        i
        for i in ids
        if (c := parse_id(i))["agents"] == agents and size in (None, c["size"]) and holes in (None, c["holes"])
    }


def gained_lost(
    mine: Set[str], theirs: Set[str], agents: int, size: int | None = None, holes: float | None = None
) -> tuple[int, int]:
    """Instances with ``agents`` agents (on ``size`` maps, of hole level ``holes``, if given) in ``mine`` and
    not in ``theirs``, and the reverse."""
    mine, theirs = cell_ids(mine, agents, size, holes), cell_ids(theirs, agents, size, holes)
    return len(mine - theirs), len(theirs - mine)


def read_scored(path: str | Path) -> Scored:
    """An ``envengineer eval --out`` file, a run's benchmark record or a ``tune.rescore`` record;
    ``CompareError`` for anything else."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CompareError(f"{path}: not a readable JSON file ({error})") from error
    if isinstance(data, dict) and isinstance(data.get("verdicts"), list):
        rows = data["verdicts"]
        if not all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in rows):
            raise CompareError(f"{path}: every verdict needs an id")
        scored = frozenset(r["id"] for r in rows)
        valid = frozenset(r["id"] for r in rows if r.get("valid") is True)
        optimal = frozenset(r["id"] for r in rows if r.get("optimal") is True)
    elif isinstance(data, dict) and {"scored", "valid", "optimal"} <= data.keys():  # a run's benchmark.json
        scored, valid, optimal = (_ids(data, key, path) for key in ("scored", "valid", "optimal"))
    elif isinstance(data, dict) and {"suite", "per_cell", "valid", "optimal"} <= data.keys():
        suite, per_cell = data["suite"], data["per_cell"]
        if not isinstance(suite, str) or suite not in SUITES or not (per_cell is None or isinstance(per_cell, int)):
            raise CompareError(f"{path}: unknown suite {suite!r} or per_cell {per_cell!r}")
        specs = SUITES[suite].specs()
        scored = frozenset(s.id for s in specs if per_cell is None or parse_id(s.id)["index"] < per_cell)
        valid, optimal = _ids(data, "valid", path), _ids(data, "optimal", path)
    elif isinstance(data, dict) and "table" in data:
        raise CompareError(
            f"{path}: holds the table only, not which instances were solved (written by an older version): "
            "score the policy again with `envengineer eval --out`"
        )
    else:
        raise CompareError(
            f"{path}: not a scored record (expected the JSON of `envengineer eval --out`, a run's "
            "final/benchmark.json or a tune.rescore record)"
        )
    if stray := sorted(i for i in scored | valid | optimal if parse_id(i) is None):
        raise CompareError(f"{path}: {len(stray)} ids are not suite instance ids, e.g. {stray[0]!r}")
    if not (valid <= scored and optimal <= valid):
        raise CompareError(f"{path}: solved ids outside the scored instances, or optimal ones that are not valid")
    return Scored(str(path), scored, valid, optimal)


def _ids(data: dict, key: str, path: Path) -> frozenset[str]:
    if not (isinstance(data[key], list) and all(isinstance(i, str) for i in data[key])):
        raise CompareError(f"{path}: {key!r} is not a list of instance ids")
    return frozenset(data[key])


def sums(scored: Scored, agents: int, size: int | None = None, holes: float | None = None) -> tuple[float, float]:
    """The paper's acc. and opt. Sum for ``agents`` agents: the mean over map sizes of the per-size rates, %
    (with ``size``: that size's rates; with ``holes``: of the instances drawn with that hole ratio only)."""
    sizes: dict[int, list[str]] = {}
    for i in cell_ids(scored.scored, agents, size, holes):
        sizes.setdefault(parse_id(i)["size"], []).append(i)
    cells = [sizes[s] for s in sorted(sizes)]  # summed in the order of env.benchmark.ScoreTable
    acc = [100 * sum(i in scored.valid for i in ids) / len(ids) for ids in cells]
    opt = [100 * sum(i in scored.optimal for i in ids) / len(ids) for ids in cells]
    return sum(acc) / len(acc), sum(opt) / len(opt)


def compare(first: Scored, second: Scored, by_size: bool = False, by_holes: bool = False) -> list[PairedRow]:
    """Per agent count (and, ``by_size``, per map size of it, ``by_holes``, per hole level of it, before its
    Sum), both scores and the instances the second gained and lost against the first; the two must have scored
    the same instances."""
    if first.scored != second.scored:
        raise CompareError(
            f"the two scored different instances ({len(first.scored)} and {len(second.scored)}, "
            f"{len(first.scored & second.scored)} in common): score both on the same suite, agents, sizes and per-cell"
        )
    rows = []
    for agents in sorted({parse_id(i)["agents"] for i in first.scored}):
        ids = cell_ids(first.scored, agents)
        sizes = [(size, None) for size in sorted({parse_id(i)["size"] for i in ids})] if by_size else []
        holes = [(None, level) for level in sorted({parse_id(i)["holes"] for i in ids})] if by_holes else []
        for size, level in [*sizes, *holes, (None, None)]:
            count = len(cell_ids(first.scored, agents, size, level))
            valid = gained_lost(second.valid, first.valid, agents, size, level)
            optimal = gained_lost(second.optimal, first.optimal, agents, size, level)
            scores = sums(first, agents, size, level), sums(second, agents, size, level)
            rows.append(PairedRow(agents, size, count, *scores, valid, optimal, holes=level))
    return rows


def to_markdown(first: Scored, second: Scored, rows: list[PairedRow]) -> str:
    """The comparison as a Markdown table, with a line naming the two policies."""

    def pair(values: tuple[float, float]) -> str:
        return f"{values[0]:.1f}/{values[1]:.1f}"

    def split(counts: tuple[int, int], p: float) -> str:
        return f"{counts[0]}/{counts[1]} (p {p:.2g})"

    def part(r: PairedRow) -> str:
        return f"{r.size}x{r.size}" if r.size else f"holes {r.holes:g}" if r.holes is not None else "Sum"

    parts = any(r.size is not None or r.holes is not None for r in rows)
    lines = [
        f"A = {first.label}, B = {second.label}; acc./opt. Sum in % (per size: its rates; per hole level: the Sum "
        "of the instances drawn with it); gained/lost: instances B solves and A does not, and the reverse, with "
        "the exact McNemar p-value of that split.",
        "",
        *md_head(
            ["agents", *(["part"] if parts else []), "instances", "A", "B", "B - A"]
            + ["valid gained/lost", "optimal gained/lost"]
        ),  # fmt: skip
    ]
    for r in rows:
        which = [part(r)] if parts else []
        change = f"{r.second[0] - r.first[0]:+.1f}/{r.second[1] - r.first[1]:+.1f}"
        cells = [str(r.agents), *which, str(r.instances), pair(r.first), pair(r.second), change]
        lines.append(md_row(cells + [split(r.valid, r.valid_p), split(r.optimal, r.optimal_p)]))
    return "\n".join(lines) + "\n"

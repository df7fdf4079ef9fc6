"""The fixed evaluation suites: the benchmark (3..5 agents) and the validation split (2..5 agents).

Each suite is a grid of cells (agent count x map size x wait-ratio subset) with a fixed number of
instances per cell; instance ``k`` of a subset gets hole ratio ``HOLE_LEVELS[k % 4]`` (0.0 to 0.3), and
the subset's wait ratio decides which instances must need a WAIT. Ids encode the cell:
``bench/a3/s05/wr0.50/017``. Seeds derive from the suite name and cell, so a rebuild is bit-identical.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from env.config import MAX_SIZE, MIN_SIZE, count_with_ratio
from env.evaluate import Verdict
from env.generator import DrawResult, InstanceSpec, derive_seed, make_instances
from env.instance import Instance
from env.markdown import size_table

DATA_DIR = Path(__file__).parent / "data"
HOLE_LEVELS = (0.0, 0.1, 0.2, 0.3)
WAIT_SUBSETS = (0.25, 0.50, 0.75)
ID_PATTERN = re.compile(r"^(?P<suite>\w+)/a(?P<agents>\d+)/s(?P<size>\d+)/wr(?P<wait>[\d.]+)/(?P<index>\d+)$")


@dataclass(frozen=True)
class Suite:
    name: str
    agent_counts: tuple[int, ...]
    per_subset: int
    salt: str

    @property
    def path(self) -> Path:
        return DATA_DIR / f"{self.name}_v1.jsonl"

    @property
    def checksum_path(self) -> Path:
        return self.path.with_suffix(".sha256")

    def cells(self) -> list[tuple[int, int, float]]:
        """(agents, size, wait subset) of every cell; sizes from max(3, agents) to 10."""
        return [
            (agents, size, wait)
            for agents in self.agent_counts
            for size in range(max(MIN_SIZE, agents), MAX_SIZE + 1)
            for wait in WAIT_SUBSETS
        ]

    def specs(self, cells: list[tuple[int, int, float]] | None = None) -> list[InstanceSpec]:
        specs = []
        for agents, size, wait in cells or self.cells():
            flags = [k < count_with_ratio(self.per_subset, wait) for k in range(self.per_subset)]
            random.Random(derive_seed(self.salt, agents, size, wait, "order")).shuffle(flags)
            for k, want_wait in enumerate(flags):
                specs.append(
                    InstanceSpec(
                        id=f"{self.name}/a{agents}/s{size:02d}/wr{wait:.2f}/{k:03d}",
                        size=size,
                        num_agents=agents,
                        hole_ratio=HOLE_LEVELS[k % len(HOLE_LEVELS)],
                        want_wait=want_wait,
                        seed=derive_seed(self.salt, agents, size, wait, k),
                    )
                )
        return specs


BENCHMARK = Suite("benchmark", agent_counts=(3, 4, 5), per_subset=50, salt="benchmark-v1")
VALIDATION = Suite("validation", agent_counts=(2, 3, 4, 5), per_subset=5, salt="validation-v1")
SUITES = {s.name: s for s in (BENCHMARK, VALIDATION)}


class SuiteError(RuntimeError):
    """A suite that could not be built exactly as specified."""


def build(suite: Suite, workers: int = 1, cells=None, progress=None) -> list[Instance]:
    """Build (part of) a suite; raises ``SuiteError`` if any instance falls short of its spec."""
    specs = suite.specs(cells)
    results: list[DrawResult] = make_instances(specs, workers, progress)
    problems = [
        spec.id for spec, r in zip(specs, results) if r.instance is None or r.instance.requires_wait != spec.want_wait
    ]
    if problems:
        raise SuiteError(f"{len(problems)} instances fell short of their spec: {problems[:5]}")
    return [r.instance for r in results]


def checksum(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def parse_id(instance_id: str) -> dict | None:
    """The cell an id belongs to: suite, agents, size, wait subset, index and the hole ratio the instance was
    drawn with (``HOLE_LEVELS[index % 4]``) (None if not a suite id)."""
    match = ID_PATTERN.match(instance_id)
    if not match:
        return None
    return {
        "suite": match["suite"],
        "agents": int(match["agents"]),
        "size": int(match["size"]),
        "wait": float(match["wait"]),
        "index": int(match["index"]),
        "holes": HOLE_LEVELS[int(match["index"]) % len(HOLE_LEVELS)],
    }


# ----------------------------------------------------------------------------------------------
# Scoring: the paper's table.


@dataclass
class ScoreTable:
    """Valid (acc.) and optimal (opt.) rates in percent per agent count and size, and their Sum."""

    acc: dict[int, dict[int, float]]
    opt: dict[int, dict[int, float]]
    counts: dict[int, dict[int, int]]

    def sum_acc(self, agents: int) -> float:
        return sum(self.acc[agents].values()) / len(self.acc[agents])

    def sum_opt(self, agents: int) -> float:
        return sum(self.opt[agents].values()) / len(self.opt[agents])

    def to_dict(self) -> dict:
        return {
            str(a): {
                "sizes": {
                    str(s): {"acc": self.acc[a][s], "opt": self.opt[a][s], "n": self.counts[a][s]} for s in self.acc[a]
                },
                "sum": {"acc": self.sum_acc(a), "opt": self.sum_opt(a)},
            }
            for a in self.acc
        }

    def to_markdown(self) -> str:
        sizes = sorted({s for row in self.acc.values() for s in row})
        rows = [
            (
                str(a),
                [f"{self.acc[a][s]:.2f}/{self.opt[a][s]:.2f}" if s in self.acc[a] else "-" for s in sizes],
                f"{self.sum_acc(a):.2f}/{self.sum_opt(a):.2f}",
            )
            for a in sorted(self.acc)
        ]
        return "\n".join(size_table(sizes, rows))


def score(instances: list[Instance], verdicts: dict[str, Verdict], wait: float | None = None) -> ScoreTable:
    """The paper's table over ``instances``; an instance without a verdict counts as a failure.

    ``wait`` restricts the table to one wait-ratio subset (ids must follow the suite pattern)."""
    valid: dict[int, dict[int, list[bool]]] = defaultdict(lambda: defaultdict(list))
    optimal: dict[int, dict[int, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for instance in instances:
        if wait is not None:
            cell = parse_id(instance.id)
            if cell is None or cell["wait"] != wait:
                continue
        verdict = verdicts.get(instance.id)
        valid[instance.num_agents][instance.size].append(bool(verdict and verdict.valid))
        optimal[instance.num_agents][instance.size].append(bool(verdict and verdict.optimal))

    def rate(table):
        return {a: {s: 100.0 * sum(v) / len(v) for s, v in sorted(row.items())} for a, row in sorted(table.items())}

    counts = {a: {s: len(v) for s, v in sorted(row.items())} for a, row in sorted(valid.items())}
    return ScoreTable(acc=rate(valid), opt=rate(optimal), counts=counts)

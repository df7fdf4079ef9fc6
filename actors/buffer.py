"""The trajectory buffer: object-store references to trajectory batches, and the running failure table.

Rollout workers ``add`` their batch under (step, worker); the buffer puts it into the object store as
its owner, so it outlives a worker that dies (Ray 2.56 removed ``ray.put(_owner=...)``). A retried
worker re-adds the same key: it replaces, never adds. The driver ``take``s a step once every worker's
batch is in; only then are its failure statistics folded into the running table, so a trajectory is
counted exactly once. The learner fetches the batches from the object store itself; the engineer reads
``statistics``, and level replay reads ``levels``: every instance trained on with its latest score.
"""

from __future__ import annotations

from typing import Any

import ray

from actors.level_replay import Level
from actors.trajectory import RolloutSummary, TrajectoryBatch
from env.stats import FailureTable


@ray.remote(num_cpus=0, max_restarts=0)
class TrajectoryBuffer:
    def __init__(self):
        # (step, attempt) -> worker -> batch; attempt 0 is the step's draw, 1.. its refills (dynamic sampling)
        self.pending: dict[tuple[int, int], dict[int, tuple[ray.ObjectRef, FailureTable, RolloutSummary]]] = {}
        self.pending_levels: dict[tuple[int, int], dict[int, dict[str, tuple[dict, float]]]] = {}
        self.taken: set[tuple[int, int]] = set()
        self.table = FailureTable()
        self.trajectories = 0
        self.levels: dict[str, Level] = {}  # instance id -> the level, its latest score, the step it was played

    def add(
        self,
        step: int,
        worker: int,
        batch: TrajectoryBatch,
        table: FailureTable,
        summary: RolloutSummary,
        attempt: int = 0,
    ) -> bool:
        """Store worker ``worker``'s batch of global step ``step`` (draw ``attempt``) in the object store, owned
        by the buffer so that it outlives the worker. False if that draw was already taken (a late duplicate,
        ignored)."""
        if (step, attempt) in self.taken:
            return False
        self.pending.setdefault((step, attempt), {})[worker] = (ray.put(batch), table, summary)
        self.pending_levels.setdefault((step, attempt), {})[worker] = batch.level_scores()
        return True

    def ready(self, step: int, attempt: int = 0) -> list[int]:
        return sorted(self.pending.get((step, attempt), {}))

    def take(
        self, step: int, workers: int | list[int], attempt: int = 0
    ) -> tuple[list[ray.ObjectRef], list[RolloutSummary]]:
        """The batch references of draw ``attempt`` of ``step`` and the workers' summaries (in worker order;
        ``workers`` is their number or their ids), folding the batches' statistics into the running table."""
        expected = list(range(workers)) if isinstance(workers, int) else sorted(workers)
        shards = self.pending.get((step, attempt), {})
        if sorted(shards) != expected:
            raise RuntimeError(
                f"step {step} draw {attempt}: batches from workers {sorted(shards)}, expected {expected}"
            )
        self.pending.pop((step, attempt))
        self.taken.add((step, attempt))
        for _, table, summary in shards.values():
            self.table.merge(table)
            self.trajectories += summary.samples
        for scores in self.pending_levels.pop((step, attempt), {}).values():
            for level_id, (level, score) in scores.items():
                self.levels[level_id] = Level(level, score, step)
        return [shards[w][0] for w in expected], [shards[w][2] for w in expected]

    def statistics(self) -> dict[str, Any]:
        """Trajectories taken so far and the running failure table's summary."""
        return {"trajectories": self.trajectories, "summary": self.table.summary()}

    def failure_table(self) -> FailureTable:
        """The running failure table of every taken step's rollouts (what the engineer reads)."""
        return self.table

    def level_table(self) -> list[Level]:
        """Every instance of every taken step, with its latest score and the step it was last played."""
        return list(self.levels.values())

    # Checkpointing: the table, the taken steps, and batches drawn ahead of the checkpoint (overlap mode).

    def state(self) -> dict[str, Any]:
        pending = {
            step: {w: (ray.get(ref), table, summary) for w, (ref, table, summary) in shards.items()}
            for step, shards in self.pending.items()
        }
        return {
            "table": self.table.to_dict(),
            "taken": sorted(self.taken),
            "trajectories": self.trajectories,
            "pending": pending,
            "pending_levels": self.pending_levels,
            "levels": self.levels,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.table = FailureTable.from_dict(state["table"])
        self.taken = set(state["taken"])
        self.trajectories = state["trajectories"]
        self.pending_levels = state.get("pending_levels", {})
        self.levels = state.get("levels", {})
        self.pending = {
            step: {w: (ray.put(batch), table, summary) for w, (batch, table, summary) in shards.items()}
            for step, shards in state["pending"].items()
        }

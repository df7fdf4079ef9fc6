"""Metrics of a run: one JSON line per step in ``metrics.jsonl`` and the same numbers in TensorBoard.

On resume, records after the checkpoint's step are dropped from both, and from ``samples.jsonl`` (they will
be produced again), so every step appears exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested record as ``a/b/c`` names (booleans as 0/1)."""
    flat: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flatten(value, name + "/")
        elif isinstance(value, bool | int | float):
            flat[name] = float(value)
    return flat


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSON Lines file ([] if there is none). A last line that does not parse is one a
    running job is still writing: it is left out."""
    path = Path(path)
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines[:-1]]
    if lines:
        try:
            records.append(json.loads(lines[-1]))
        except json.JSONDecodeError:
            pass
    return records


def keep_through(path: str | Path, last_step: int) -> None:
    """Drop the JSON lines of ``path`` whose ``global_step`` is greater than ``last_step`` (a resumed run
    produces them again): metrics.jsonl and samples.jsonl."""
    path = Path(path)
    if path.exists():
        kept = [r for r in read_metrics(path) if r.get("global_step", -1) <= last_step]
        path.write_text("".join(json.dumps(r) + "\n" for r in kept))


class MetricsLog:
    def __init__(self, run_dir: str | Path, resume_after: int | None = None, filename: str = "metrics.jsonl"):
        """Append to ``run_dir/metrics.jsonl``; with ``resume_after``, first drop records whose
        ``global_step`` is greater (they are about to be produced again)."""
        from torch.utils.tensorboard import SummaryWriter

        self.path = Path(run_dir) / filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_after is not None:
            keep_through(self.path, resume_after)
            self.path.touch()
        purge = None if resume_after is None else resume_after + 1
        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=purge)

    def write(self, record: dict[str, Any], step: int) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        for name, value in flatten(record).items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

"""The run-folder layout, in one place: what the job writes and the report, the sweep summary and the CLI read.

run_config.yaml            the run's config, as given
metrics.jsonl              one record per GRPO step (and TensorBoard events beside it)
samples.jsonl              with grpo.log_samples: a few groups of sampled responses per step, scored
learner.jsonl              the learners' device and resolved precision, one line per start or resume
provenance.jsonl           the code's git commit, library versions, the driver's machine; a line per start or resume
checkpoints/step-N/        the trainer's resume record
kept/                      revert_below_start: the learners' state a round that validates below the start returns to
start/                     the starting policy scored before RL: a RunDir with validation.json and final/
round_<k>/env_config.yaml  the round's environment configuration
round_<k>/levels.jsonl     plr-levels: the instances the round replays (written before env_config.yaml)
round_<k>/validation.json  held-out validation after the round's training (summary, table, failed cases)
round_<k>/guard.json       revert_below_start: the round's valid rate, the start's, and whether it was undone
round_<k>/engineer/        the engineer's prompt, answers and decision.json
final/benchmark.json       the benchmark table after the last round
plots/, report.md          the report
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from actors.metrics import read_metrics


class RoundDir:
    """``round_<k>/``: the round's config, its validation report and the engineer's files."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.index = int(self.path.name.split("_")[1])
        self.env_config = self.path / "env_config.yaml"
        self.levels = self.path / "levels.jsonl"
        self.validation = self.path / "validation.json"
        self.guard = self.path / "guard.json"
        self.engineer = self.path / "engineer"
        self.decision = self.engineer / "decision.json"

    def undone(self) -> bool:
        """Whether the validation guard undid the round (``revert_below_start``)."""
        return self.guard.exists() and read_json(self.guard)["reverted"]


class RunDir:
    """A run folder (or the scored start inside one, which has the same validation and final files)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.run_config = self.path / "run_config.yaml"
        self.metrics = self.path / "metrics.jsonl"
        self.samples = self.path / "samples.jsonl"
        self.learner = self.path / "learner.jsonl"
        self.provenance = self.path / "provenance.jsonl"
        self.validation = self.path / "validation.json"  # a scored start's (round -1)
        self.benchmark = self.path / "final" / "benchmark.json"
        self.plots = self.path / "plots"
        self.report = self.path / "report.md"
        self.kept = self.path / "kept"

    @property
    def start(self) -> RunDir:
        """The starting policy's scores, before RL."""
        return RunDir(self.path / "start")

    def round(self, k: int) -> RoundDir:
        return RoundDir(self.path / f"round_{k}")

    def precision(self) -> str:
        """The learners' resolved precision at each start or resume, e.g. ``bf16`` or ``bf16/fp32``; "" when
        the run has no ``learner.jsonl`` (runs from before it)."""
        return "/".join(dict.fromkeys(r["precision"] for r in read_metrics(self.learner)))

    def code(self) -> str:
        """The code's commit at each start or resume (8 hex digits; ``*``: with uncommitted changes)."""
        codes = [r["code"] for r in read_metrics(self.provenance)]
        return "/".join(dict.fromkeys((c["commit"] or "?")[:8] + ("*" if c["dirty"] else "") for c in codes))

    def rounds(self, validated: bool = False) -> list[RoundDir]:
        """The round folders in order (only those with a validation report, if ``validated``)."""
        found = [RoundDir(p) for p in self.path.glob("round_*") if p.is_dir()]
        return sorted((r for r in found if r.validation.exists() or not validated), key=lambda r: r.index)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def validation_rates(report: Path) -> tuple[float, float] | None:
    """A validation report's (valid rate, optimal rate), fractions; None while it is not written."""
    if not report.exists():
        return None
    summary = read_json(report)["summary"]
    return summary["valid_rate"], summary["optimal_rate"]


def benchmark_sums(benchmark: Path) -> dict[str, dict[str, float]]:
    """``final/benchmark.json``'s Sums by agent count, in %: ``{"3": {"acc": .., "opt": ..}}``; {} while it is
    not written."""
    if not benchmark.exists():
        return {}
    return {agents: table["sum"] for agents, table in read_json(benchmark)["table"].items()}

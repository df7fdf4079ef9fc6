"""The probe (``engineer.probe``): measure a proposed configuration on the current policy before it is adopted.

A few instances are drawn per size that has data in the proposal (from that size's knobs, seeded by the
config seed, the round and the size), and the current policy answers them greedily through its deployment.
A size whose pass rate lies outside the learning band (by default: every instance failed, or every one
passed) gives GRPO no signal there. Those sizes and the evidence go back to the engineer, which revises
once: an LLM engineer is asked again with the probe's table beside its first answer; a baseline, or an
LLM whose revision is unusable, has the flagged sizes' data removed (unless no size would keep any).
The revision is probed too, for the record; there is no further round. Probes are saved with the decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from env.config import EnvConfig
from env.evaluate import Verdict
from env.generator import make_instance, sample_specs
from env.instance import Instance

PROBE_REVISED = "probe: revised by the engineer"  # the decision note when the engineer revised its proposal

Score = Callable[[list[Instance]], list[Verdict]]  # the current policy's greedy verdicts, in order


class ProbeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_size: int = Field(4, ge=1, le=64, description="instances drawn per size that has data")
    low: float = Field(0.0, ge=0.0, le=1.0, description="a size passing at this rate or less is flagged (too hard)")
    high: float = Field(1.0, ge=0.0, le=1.0, description="a size passing at this rate or more is flagged (too easy)")
    max_tokens: int = Field(256, ge=16, description="longest greedy answer of the policy")


@dataclass
class Probe:
    """One configuration probed: per-size pass counts, the flagged sizes and every verdict."""

    sizes: dict[int, tuple[int, int]]  # size -> (passed, drawn)
    flagged: dict[int, str]  # size -> "all fail" / "all pass" (or "too hard" / "too easy" with a custom band)
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # id, size, valid, failure, detail
    instances: list[dict[str, Any]] = field(default_factory=list)  # the drawn instances (saved beside)

    def to_dict(self) -> dict[str, Any]:
        sizes = {size: list(counts) for size, counts in self.sizes.items()}
        return {"sizes": sizes, "flagged": self.flagged, "verdicts": self.verdicts}


def probe_instances(config: EnvConfig, per_size: int, round_index: int) -> list[Instance]:
    """``per_size`` solvable instances of every size with data, drawn from that size's knobs."""
    instances = []
    for size, knobs in sorted(config.sizes.items()):
        if knobs.data_ratio <= 0:
            continue
        alone = config.model_copy(update={"sizes": {size: knobs.model_copy(update={"data_ratio": 1.0})}})
        specs = sample_specs(alone, per_size, "probe", round_index, size, id_prefix="probe")
        instances += [r.instance for r in map(make_instance, specs) if r.instance is not None]
    return instances


def run_probe(config: EnvConfig, settings: ProbeConfig, round_index: int, score: Score) -> Probe:
    """Draw, answer greedily with the current policy, and flag the sizes outside the band."""
    instances = probe_instances(config, settings.per_size, round_index)
    verdicts = score(instances) if instances else []
    counts: dict[int, list[int]] = {}
    for instance, verdict in zip(instances, verdicts):
        passed = counts.setdefault(instance.size, [0, 0])
        passed[0] += int(verdict.valid)
        passed[1] += 1
    flagged = {}
    all_or_none = settings.low == 0.0 and settings.high == 1.0
    for size, (passed, drawn) in counts.items():
        if passed / drawn <= settings.low:
            flagged[size] = "all fail" if all_or_none else "too hard"
        elif passed / drawn >= settings.high:
            flagged[size] = "all pass" if all_or_none else "too easy"
    rows = [
        {"id": i.id, "size": i.size, "valid": v.valid, "failure": v.failure, "detail": v.detail}
        for i, v in zip(instances, verdicts)
    ]
    return Probe({s: tuple(c) for s, c in sorted(counts.items())}, flagged, rows, [i.model_dump() for i in instances])


def evidence(probe: Probe) -> str:
    """The probe's table for the engineer's revision prompt."""
    lines = ["size | passed | verdict"]
    for size, (passed, drawn) in probe.sizes.items():
        verdict = probe.flagged.get(size, "in the learning band")
        lines.append(f"{size}x{size} | {passed}/{drawn} | {verdict}")
    return (
        "Before adopting your configuration, the current policy answered a few instances of each size you gave "
        "data (greedy):\n" + "\n".join(lines) + "\nSizes where it fails every instance or passes every one give "
        "no learning signal. Revise the configuration: move their data to sizes in the band, or change their "
        "hole_ratio / wait_ratio so that some instances pass and some fail. Answer with the JSON object only."
    )


def drop_flagged(config: EnvConfig, probe: Probe) -> tuple[dict[str, Any] | None, str]:
    """The mechanical revision: no data on the flagged sizes (None if no size would keep any)."""
    kept = {s: k for s, k in config.sizes.items() if k.data_ratio > 0 and s not in probe.flagged}
    if not kept:
        return None, "every size with data is flagged; kept the proposal"
    raw = config.to_dict()
    for size in probe.flagged:
        raw["sizes"][size]["data_ratio"] = 0.0
    return raw, f"dropped the data of the flagged sizes {sorted(probe.flagged)}"

"""Non-LLM engineers with the same interface as the LLM ones: (inputs, settings) -> a raw proposal (projected
later).

- ``fixed``: keep the round-0 configuration (GRPO on a fixed config, the paper's baseline);
- ``random``: a fresh random configuration each round (domain randomisation);
- ``heuristic``: move the budget toward sizes whose validation valid rate is in a learning band, and make
  sizes the policy has mastered harder (more holes, more WAIT instances);
- ``plr``: Prioritized Level Replay over map sizes: a regret proxy v(1 - v) of each size's valid rate,
  rank-prioritised with a temperature, mixed with a staleness term;
- ``band``: steer each size's hole ratio so that its *training rollouts* stay in a learning band: the
  sampled valid rate of the rollouts at the size's current hole ratio (all rounds so far, the buffer's
  table) below 20% lowers the holes by 0.1, above 60% raises them by 0.05 (``engineer.band``); data and WAIT
  shares are kept (a local edit). It reads the evidence the fixed random configuration wastes: boards so
  holed that no sample of a group is valid carry no signal.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.engineer_context import EngineerInputs
from env.config import RANGES, SIZES, random_config
from env.generator import derive_seed
from env.stats import HOLE_BIN

LEARNING_BAND = (0.15, 0.85)
PLR_TEMPERATURE, PLR_STALENESS = 0.3, 0.3


class BandConfig(BaseModel):
    """The ``band`` engineer's target and steps (``engineer.band``)."""

    model_config = ConfigDict(extra="forbid")

    low: float = Field(0.2, ge=0.0, le=1.0, description="a size's rollouts valid below this: fewer holes")
    high: float = Field(0.6, ge=0.0, le=1.0, description="above this: more holes")
    down: float = Field(0.1, ge=0.0, le=0.6, description="hole ratio taken off below the band")
    up: float = Field(0.05, ge=0.0, le=0.6, description="hole ratio added above the band")
    min_samples: int = Field(8, ge=1, description="rollouts a size needs at its current hole ratio to be moved")

    @model_validator(mode="after")
    def _ordered(self) -> BandConfig:
        if self.low > self.high:
            raise ValueError(f"band: low {self.low} is above high {self.high}")
        return self


class BaselineSettings(Protocol):
    """What a baseline reads of the engineer's settings (``actors.engineer.EngineerConfig``)."""

    backend: str
    band: BandConfig


def size_rates(inputs: EngineerInputs) -> dict[int, float]:
    """Validation valid rate per map size, for the config's agent count (all counts if it has none)."""
    rows = [k for k in inputs.validation.cells if k[1] == inputs.config.num_agents] or list(inputs.validation.cells)
    rates: dict[int, list[int]] = {}
    for key in rows:
        cell = inputs.validation.cells[key]
        totals = rates.setdefault(key[0], [0, 0])
        totals[0] += cell.valid
        totals[1] += cell.total
    return {size: valid / total for size, (valid, total) in rates.items() if total}


def _raw(inputs: EngineerInputs, sizes: dict[int, dict[str, float]]) -> dict[str, Any]:
    return {"sizes": sizes, "num_agents": inputs.config.num_agents, "num_instances": inputs.config.num_instances}


def fixed(inputs: EngineerInputs, settings: BaselineSettings) -> dict[str, Any]:
    first = inputs.history[0].config if inputs.history else inputs.config
    return first.to_dict()


def randomised(inputs: EngineerInputs, settings: BaselineSettings) -> dict[str, Any]:
    config = random_config(derive_seed(inputs.config.seed, "random-engineer", inputs.round + 1))
    return _raw(inputs, {s: k.model_dump() for s, k in config.sizes.items()})


def heuristic(inputs: EngineerInputs, settings: BaselineSettings) -> dict[str, Any]:
    rates = size_rates(inputs)
    low, high = LEARNING_BAND
    sizes = {}
    for size in SIZES:
        current = inputs.config.sizes.get(size)
        hole = current.hole_ratio if current else 0.2
        wait = current.wait_ratio if current else 0.3
        rate = rates.get(size)
        if rate is None or low <= rate <= high:
            weight = 1.0
        elif rate > high:  # mastered: a little data, harder
            weight, hole, wait = 0.3, min(hole + 0.05, 0.5), min(wait + 0.1, 1.0)
        else:  # too hard: a little data, easier
            weight, hole = 0.3, max(hole - 0.05, 0.0)
        sizes[size] = {"data_ratio": weight, "hole_ratio": round(hole, 2), "wait_ratio": round(wait, 2)}
    return _raw(inputs, sizes)


def plr(inputs: EngineerInputs, settings: BaselineSettings) -> dict[str, Any]:
    rates = size_rates(inputs)
    scores = {size: rates[size] * (1 - rates[size]) if size in rates else 0.25 for size in SIZES}
    ranked = sorted(SIZES, key=lambda s: (-scores[s], s))
    by_score = {size: (1.0 / (rank + 1)) ** (1.0 / PLR_TEMPERATURE) for rank, size in enumerate(ranked)}
    last_seen = {size: -1 for size in SIZES}
    for record in [*inputs.history, None]:
        config = inputs.config if record is None else record.config
        round_index = inputs.round if record is None else record.round
        for size, knobs in config.sizes.items():
            if knobs.data_ratio > 0:
                last_seen[size] = round_index
    staleness = {size: inputs.round - last_seen[size] for size in SIZES}
    score_total, stale_total = sum(by_score.values()), sum(staleness.values()) or 1
    sizes = {}
    for size in SIZES:
        share = (1 - PLR_STALENESS) * by_score[size] / score_total + PLR_STALENESS * staleness[size] / stale_total
        current = inputs.config.sizes.get(size)
        sizes[size] = {
            "data_ratio": share,
            "hole_ratio": current.hole_ratio if current else 0.2,
            "wait_ratio": current.wait_ratio if current else 0.3,
        }
    return _raw(inputs, sizes)


def rollout_rates(inputs: EngineerInputs, min_samples: int) -> dict[int, float]:
    """Sampled valid rate of the training rollouts per map size, at the config's agent count and within one
    hole bin of the size's current hole ratio (sizes with fewer than ``min_samples`` rollouts left out)."""
    counts: dict[int, list[int]] = {}
    for (size, agents, hole, _), cell in (inputs.rollouts.cells if inputs.rollouts else {}).items():
        current = inputs.config.sizes.get(size)
        if agents == inputs.config.num_agents and current and abs(hole - current.hole_ratio) <= HOLE_BIN + 1e-9:
            totals = counts.setdefault(size, [0, 0])
            totals[0] += cell.valid
            totals[1] += cell.total
    return {size: valid / total for size, (valid, total) in counts.items() if total >= min_samples}


def band(inputs: EngineerInputs, settings: BaselineSettings) -> dict[str, Any]:
    """Each size's hole ratio one step toward its rollouts' learning band (``settings.band``); the rest kept."""
    target = settings.band
    rates = rollout_rates(inputs, target.min_samples)
    sizes = {}
    for size, knobs in inputs.config.sizes.items():
        hole, rate = knobs.hole_ratio, rates.get(size)
        if rate is not None and rate < target.low:
            hole = max(hole - target.down, 0.0)
        elif rate is not None and rate > target.high:
            hole = min(hole + target.up, RANGES["hole_ratio"][1])
        sizes[size] = knobs.model_dump() | {"hole_ratio": round(hole, 2)}
    return _raw(inputs, sizes)


BASELINES = {"fixed": fixed, "random": randomised, "heuristic": heuristic, "plr": plr, "band": band}


def evidence_note(inputs: EngineerInputs, settings: BaselineSettings) -> str | None:
    """One line naming the per-size rates the baseline decided from (for decision.json's notes; None for a
    baseline that reads none)."""
    if settings.backend in ("heuristic", "plr"):
        label, rates = "validation valid", size_rates(inputs)
    elif settings.backend == "band":
        label, rates = "rollouts valid at the current hole ratio", rollout_rates(inputs, settings.band.min_samples)
    else:
        return None
    shown = ", ".join(f"{size}x{size} {rate:.0%}" for size, rate in sorted(rates.items()))
    return f"evidence: {label}: {shown or 'no size with enough'}"

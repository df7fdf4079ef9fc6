"""The environment engineer's context: small modules, each a pure function producing one section, and the
paper's ablation presets V1..V6 that switch them on and off.

Modules: failure breakdown (per size and agent count: valid/optimal rates, failure counts, a few failed
cases as text), guideline (what each knob means and how to edit well), history of (config, validation)
pairs of earlier rounds (with or without the round-0 default), self-summary (the engineer's own summary
of the policy's behaviour, written first), training details (full RL hyperparameters, or bookkeeping
only: round, steps, budget).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.level_replay import Level
from env.config import RANGES, SIZES, EnvConfig
from env.evaluate import FAILURE_CATEGORIES
from env.stats import FailureTable


class ContextConfig(BaseModel):
    """Which modules the engineer's prompt contains."""

    model_config = ConfigDict(extra="forbid")

    failure_breakdown: bool = True
    guideline: bool = False
    history: Literal["off", "with_default", "without_default"] = "off"
    self_summary: bool = False
    training_details: Literal["off", "full", "bookkeeping"] = "off"
    failed_examples: int = Field(3, ge=0, le=20, description="failed validation answers shown as text")


PRESETS: dict[str, ContextConfig] = {
    "V1": ContextConfig(),
    "V2": ContextConfig(guideline=True),
    "V3": ContextConfig(guideline=True, history="with_default"),
    "V4": ContextConfig(guideline=True, history="without_default"),
    "V5": ContextConfig(guideline=True, history="without_default", self_summary=True),
    "V6": ContextConfig(guideline=True, history="without_default", training_details="bookkeeping"),
}


@dataclass
class FailedCase:
    """One failed validation answer: the instance drawn as text, the answer and the verdict."""

    instance_text: str
    response: str
    failure: str
    detail: str


@dataclass
class RoundRecord:
    """What a round was trained on and how validation went afterwards."""

    round: int
    config: EnvConfig
    validation: FailureTable


@dataclass
class EngineerInputs:
    """Everything the engineer may see when it proposes the config of round ``round + 1``."""

    round: int
    config: EnvConfig  # the config of the round just trained
    validation: FailureTable  # held-out validation after it
    rollouts: FailureTable | None = None  # the training rollouts' failure statistics (from the buffer)
    failed_cases: list[FailedCase] = field(default_factory=list)
    history: list[RoundRecord] = field(default_factory=list)  # earlier rounds, round 0 first
    training: dict[str, Any] = field(default_factory=dict)  # RL hyperparameters
    bookkeeping: dict[str, Any] = field(default_factory=dict)  # round index, steps, budget
    levels: list[Level] = field(default_factory=list)  # every instance trained on, scored (plr-levels only)
    step: int = 0  # the global step the round ended at


def _rates(table: FailureTable) -> str:
    lines = ["size agents | n | valid | optimal | failures"]
    rows: dict[tuple[int, int], Any] = {}
    for (size, agents, _, _), cell in sorted(table.cells.items()):
        rows.setdefault((size, agents), []).append(cell)
    for (size, agents), cells in rows.items():
        total = sum(c.total for c in cells)
        valid = sum(c.valid for c in cells)
        optimal = sum(c.optimal for c in cells)
        failures = {k: sum(c.failures[k] for c in cells) for k in FAILURE_CATEGORIES}
        shown = ", ".join(f"{k} {v}" for k, v in failures.items() if v) or "none"
        lines.append(f"{size}x{size} {agents} | {total} | {valid / total:.0%} | {optimal / total:.0%} | {shown}")
    return "\n".join(lines)


def failure_breakdown(inputs: EngineerInputs, examples: int) -> str:
    summary = inputs.validation.summary()
    text = (
        f"Validation after round {inputs.round}: valid {summary['valid_rate']:.1%}, optimal "
        f"{summary['optimal_rate']:.1%} over {summary['responses']} held-out instances.\n" + _rates(inputs.validation)
    )
    if inputs.rollouts is not None and inputs.rollouts.cells:
        rollouts = inputs.rollouts.summary()
        text += (
            f"\n\nTraining rollouts so far: valid {rollouts['valid_rate']:.1%} over {rollouts['responses']} samples.\n"
            + _rates(inputs.rollouts)
        )
    for case in inputs.failed_cases[:examples]:
        text += f"\n\nFailed case ({case.failure}: {case.detail}):\n{case.instance_text}\nAnswer:\n{case.response}"
    return text


def guideline() -> str:
    low, high = RANGES["hole_ratio"]
    return (
        "Each map size 3..10 has three knobs: data_ratio (share of the round's training instances at that "
        f"size; the shares are renormalised to sum to 1), hole_ratio (share of cells that are holes, {low}..{high}) "
        "and wait_ratio (share of instances whose optimal plan needs a WAIT to avoid a collision).\n"
        "Edit well: keep what works and make local edits instead of rewriting everything; put the budget where "
        "the policy is neither always failing nor always succeeding (that is where it learns); drop or shrink "
        "sizes with no learning signal (all fail or all pass); raise hole_ratio or wait_ratio for a size once "
        "the policy handles it; react to the most frequent failure category."
    )


def _config_line(config: EnvConfig) -> str:
    return json.dumps(
        {str(s): [round(k.data_ratio, 3), k.hole_ratio, k.wait_ratio] for s, k in config.sizes.items()},
        separators=(",", ":"),
    )


def history(inputs: EngineerInputs, include_default: bool) -> str:
    records = [r for r in inputs.history if include_default or r.round > 0]
    if not records:
        return "No earlier rounds."
    lines = ["Earlier rounds (config per size as [data_ratio, hole_ratio, wait_ratio] -> validation):"]
    for record in records:
        summary = record.validation.summary()
        lines.append(
            f"round {record.round}: {_config_line(record.config)} -> valid {summary['valid_rate']:.1%}, "
            f"optimal {summary['optimal_rate']:.1%}"
        )
    return "\n".join(lines)


def training_details(inputs: EngineerInputs, mode: str) -> str:
    details = inputs.training if mode == "full" else inputs.bookkeeping
    return json.dumps(details, indent=1, sort_keys=True, default=str)


TASK = (
    "You are the environment engineer of an RL run that trains a policy to plan paths for several agents on "
    "FrozenLake grids. Propose the training environment configuration of the next round. Answer with a "
    'JSON object only: {"sizes": {"<size>": {"data_ratio": ..., "hole_ratio": ..., "wait_ratio": ...}, ...}}. '
    f"Sizes are {SIZES[0]}..{SIZES[-1]}; sizes you leave out get no training data."
)


def sections(settings: ContextConfig, inputs: EngineerInputs, summary: str | None = None) -> list[tuple[str, str]]:
    """The prompt's sections, in order, as (title, text); only the switched-on modules appear."""
    parts = [("Task", TASK), ("Current configuration", inputs.config.to_yaml())]
    if settings.failure_breakdown:
        parts.append(("Failure breakdown", failure_breakdown(inputs, settings.failed_examples)))
    if settings.guideline:
        parts.append(("Guideline", guideline()))
    if settings.history != "off":
        parts.append(("History", history(inputs, settings.history == "with_default")))
    if settings.self_summary and summary:
        parts.append(("Your summary of the policy", summary))
    if settings.training_details != "off":
        parts.append(("Training details", training_details(inputs, settings.training_details)))
    return parts


def render(parts: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"## {title}\n{text}" for title, text in parts)


def summary_request(settings: ContextConfig, inputs: EngineerInputs) -> str:
    """The first call of the self-summary module: describe the policy's behaviour from the evidence."""
    evidence = sections(settings.model_copy(update={"self_summary": False}), inputs)[2:]
    return render(
        [("Task", "Summarise in a few sentences what the policy does well and badly, from this evidence.")] + evidence
    )

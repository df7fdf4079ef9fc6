"""What the policy wrote: the groups a run logged (``grpo.log_samples``: a few groups of every GRPO step in
``samples.jsonl``), each with its board and every sample's answer, reward and verdict (``envengineer
samples RUN``). Reads files only; works while the run runs."""

from __future__ import annotations

from pathlib import Path

from actors.metrics import read_metrics
from actors.run_dir import RunDir
from env.config import load_config
from env.evaluate import FAILURE_CATEGORIES, evaluate
from env.generator import make_instance, sample_specs
from env.instance import Instance, as_instance
from env.prompt import without_thinking
from env.render import ansi


class NoSamples(ValueError):
    """Nothing to show: the run logged no samples, or not at the step asked for."""


def select_groups(rows: list[dict], step: int, failure: str | None = None, limit: int = 4) -> list[dict]:
    """The first ``limit`` groups logged at ``step``, each group's samples narrowed to the ``failure``
    category (``valid``: the valid ones); groups left without samples are dropped."""
    groups = []
    for row in (r for r in rows if r["global_step"] == step):
        if samples := [s for s in row["samples"] if _matches(s, failure)]:
            groups.append(row | {"samples": samples})
    return groups[:limit]


def _matches(sample: dict, failure: str | None) -> bool:
    if failure is None:
        return True
    return sample["failure"] is None if failure == "valid" else sample["failure"] == failure


def redraw(run: RunDir, instance_id: str) -> Instance | None:
    """A rollout instance drawn again from its id and its round's configuration (the rollout workers'
    ``sample_specs(env, prompts, round, step, worker[, "refill", attempt])``, whose k-th spec does not depend
    on how many follow): for groups logged without the instance (records before 2026-12-07). None when the
    id is not a rollout's or its round's configuration is gone."""
    prefix, *parts = instance_id.split("-")  # rollout-<round>-<step>-<worker>[-refill-<attempt>]-<index>
    if prefix != "rollout" or len(parts) not in (4, 6) or not (parts[0].isdigit() and parts[-1].isdigit()):
        return None
    config = run.round(int(parts[0])).env_config
    if not config.exists():
        return None
    seed_parts = [int(p) if p.isdigit() else p for p in parts[:-1]]
    spec = sample_specs(load_config(config), int(parts[-1]) + 1, *seed_parts)[-1]
    return make_instance(spec).instance


def describe_group(row: dict, thinking: bool = False, run: RunDir | None = None) -> str:
    """A logged group as text: the instance (its board when the record carries it, or when it can be drawn
    again from ``run``), then each sample's reward and verdict (where the plan fails, from the verifier) and
    its answer (with its thinking if ``thinking``)."""
    if row.get("level"):
        instance = as_instance(row["level"])
    else:
        instance = redraw(run, row["instance"]) if run is not None else None
    lines = [_instance_line(row["instance"], instance)]
    if instance is not None:
        lines += ["  " + line for line in ansi(instance).splitlines()]
    for k, sample in enumerate(row["samples"]):
        stopped = "" if sample.get("finish_reason", "stop") == "stop" else f", stopped: {sample['finish_reason']}"
        verdict = _verdict(sample, instance)
        lines.append(f"  sample {k}: reward {sample['reward']:.2f}, {verdict} ({sample['tokens']} tokens{stopped})")
        text = sample["text"] if thinking else without_thinking(sample["text"])
        lines += ["    " + line for line in text.strip().splitlines()]
    return "\n".join(lines)


def _instance_line(instance_id: str, instance: Instance | None) -> str:
    if instance is None:
        return instance_id
    wait = ", needs a WAIT" if instance.requires_wait else ""
    return (
        f"{instance_id}: {instance.size}x{instance.size}, {instance.num_agents} agents, {len(instance.holes)} "
        f"hole{'s' * (len(instance.holes) != 1)}, optimal makespan {instance.optimal_makespan}{wait}"
    )


def _verdict(sample: dict, instance: Instance | None) -> str:
    """``valid, optimal`` / ``valid, makespan M``, or the failure category with the verifier's detail
    (the category alone when the record does not carry the instance)."""
    if instance is None:
        return "valid" if sample["failure"] is None else sample["failure"]
    verdict = evaluate(instance, sample["text"])
    if verdict.valid:
        return "valid, optimal" if verdict.optimal else f"valid, makespan {verdict.makespan}"
    when = "" if verdict.failure_step is None else f" at t={verdict.failure_step}"
    return f"{verdict.failure}{when}: {verdict.detail}"


def describe_samples(
    path: str | Path, step: int | None = None, failure: str | None = None, limit: int = 4, thinking: bool = False
) -> str:
    """What ``envengineer samples`` prints: the groups of ``step`` (default the newest logged one)."""
    if failure not in (None, "valid", *FAILURE_CATEGORIES):
        raise NoSamples(f"unknown failure category {failure!r}: valid, {', '.join(FAILURE_CATEGORIES)}")
    run = RunDir(path)
    rows = read_metrics(run.samples)
    steps = sorted({row["global_step"] for row in rows})
    if not steps:
        raise NoSamples(f"{run.path}: no logged samples (not a run folder, grpo.log_samples is 0, or no step is done)")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise NoSamples(f"{run.path}: step {step} logged no samples (steps {steps[0]}..{steps[-1]} did)")
    groups = select_groups(rows, step, failure, limit)
    rounds = {row.get("round") for row in rows if row["global_step"] == step} - {None}
    where = f"step {step}" + (f" (round {min(rounds)})" if rounds else "")
    shown = "" if failure is None else f" with {failure} samples"
    head = f"{run.path}: {where} of steps {steps[0]}..{steps[-1]}, {len(groups)} group(s){shown}"
    return "\n\n".join([head, *(describe_group(row, thinking, run) for row in groups)])

"""Held-out validation: greedy answers of the served policy on fixed instances, scored into a failure table."""

from __future__ import annotations

from env.benchmark import Suite, parse_id
from env.evaluate import RewardConfig, Verdict, evaluate
from env.instance import Instance, read_instances
from env.prompt import render_prompt
from env.stats import FailureTable


def suite_instances(suite: Suite, agents: list[int], per_cell: int | None = None) -> list[Instance]:
    """A suite's instances with these agent counts, at most ``per_cell`` per (agents, size, wait) cell."""
    chosen = []
    for instance in read_instances(suite.path):
        cell = parse_id(instance.id)
        if instance.num_agents in agents and (per_cell is None or cell["index"] < per_cell):
            chosen.append(instance)
    return chosen


def validate(
    handle, instances: list[Instance], max_tokens: int, reward: RewardConfig | None = None, chunk: int = 64
) -> tuple[FailureTable, list[Verdict], list[str]]:
    """Score the greedy answer of the deployment behind ``handle`` (a Serve handle) on every instance:
    the failure table, the verdicts and the answers, in instance order."""
    sampling = {"n": 1, "temperature": 0.0, "max_tokens": max_tokens}
    table, verdicts, answers = FailureTable(), [], []
    for start in range(0, len(instances), chunk):
        part = instances[start : start + chunk]
        conversations = [[{"role": "user", "content": render_prompt(i)}] for i in part]
        results = handle.generate_chat.remote(conversations, sampling).result()
        for instance, result in zip(part, results):
            answer = result["samples"][0]["text"]
            verdict = evaluate(instance, answer, reward)
            table.add(instance, verdict)
            verdicts.append(verdict)
            answers.append(answer)
    return table, verdicts, answers

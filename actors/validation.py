"""Held-out validation: greedy answers of the served policy on fixed instances, scored into a failure table."""

from __future__ import annotations

from env.evaluate import RewardConfig, Verdict, evaluate
from env.instance import Instance
from env.prompt import render_prompt
from env.stats import FailureTable


def validate(
    handle, instances: list[Instance], max_tokens: int, reward: RewardConfig | None = None, chunk: int = 64
) -> tuple[FailureTable, list[Verdict]]:
    """Score the greedy answer of the deployment behind ``handle`` (a Serve handle) on every instance."""
    sampling = {"n": 1, "temperature": 0.0, "max_tokens": max_tokens}
    table, verdicts = FailureTable(), []
    for start in range(0, len(instances), chunk):
        part = instances[start : start + chunk]
        conversations = [[{"role": "user", "content": render_prompt(i)}] for i in part]
        results = handle.generate_chat.remote(conversations, sampling).result()
        for instance, result in zip(part, results):
            verdict = evaluate(instance, result["samples"][0]["text"], reward)
            table.add(instance, verdict)
            verdicts.append(verdict)
    return table, verdicts

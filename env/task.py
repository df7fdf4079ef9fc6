"""The task API: the one way into MAPF-FrozenLake for whoever asks a policy (rollout workers, the validator,
the Gymnasium env).

``prompt(instance)`` is what the policy is asked; ``judge(instance, response)`` is the verifier's verdict
with its reward; ``judge_all`` scores many answers into verdicts and the failure table the engineer reads.
"""

from __future__ import annotations

from collections.abc import Iterable

from env.evaluate import RewardConfig, Verdict, evaluate
from env.instance import Instance
from env.prompt import render_prompt
from env.stats import FailureTable


def prompt(instance: Instance) -> str:
    """The user message that asks for every agent's plan."""
    return render_prompt(instance)


def messages(instance: Instance) -> list[dict[str, str]]:
    """The prompt as a chat conversation."""
    return [{"role": "user", "content": prompt(instance)}]


def judge(instance: Instance, response: str, reward: RewardConfig | None = None) -> Verdict:
    """The verdict on a response (valid, optimal, failure category, agent and time step) with its reward."""
    return evaluate(instance, response, reward)


def judge_all(
    pairs: Iterable[tuple[Instance, str]], reward: RewardConfig | None = None, table: FailureTable | None = None
) -> tuple[list[Verdict], FailureTable]:
    """Verdicts of ``(instance, response)`` pairs, in order, and the failure table they add up to (added to
    ``table`` if given)."""
    table = table if table is not None else FailureTable()
    verdicts = []
    for instance, response in pairs:
        verdict = judge(instance, response, reward)
        table.add(instance, verdict)
        verdicts.append(verdict)
    return verdicts, table

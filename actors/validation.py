"""Held-out validation and suite scoring: greedy answers (of the served policy, or of any OpenAI-compatible
endpoint) on fixed instances, scored into a failure table."""

from __future__ import annotations

from collections.abc import Callable

import ray

from actors.chat import openai_chat, serve_chat
from actors.settings import EvalConfig
from env import task
from env.benchmark import Suite, parse_id
from env.evaluate import RewardConfig, Verdict
from env.instance import Instance, read_instances
from env.stats import FailureTable


def suite_instances(
    suite: Suite, agents: list[int], per_cell: int | None = None, sizes: list[int] | None = None
) -> list[Instance]:
    """A suite's instances with these agent counts (and map sizes, if given), at most ``per_cell`` per
    (agents, size, wait) cell."""
    chosen = []
    for instance in read_instances(suite.path):
        cell = parse_id(instance.id)
        if (
            instance.num_agents in agents
            and (sizes is None or cell["size"] in sizes)
            and (per_cell is None or cell["index"] < per_cell)
        ):
            chosen.append(instance)
    return chosen


def eval_instances(suite: Suite, settings: EvalConfig) -> list[Instance]:
    """The suite instances a run's ``validation`` or ``benchmark`` settings select."""
    return suite_instances(suite, settings.agents, settings.per_cell, settings.sizes)


Answerer = Callable[[list[str]], list[str]]  # prompts (user messages) -> answers


def serve_answerer(handle, max_tokens: int) -> Answerer:
    """Greedy answers of a Serve deployment of this project."""
    return serve_chat(handle, max_tokens, temperature=0.0)


def openai_answerer(base_url: str, model: str, key_env: str, max_tokens: int) -> Answerer:
    """Greedy answers of any OpenAI-compatible chat endpoint (one request per prompt)."""
    return openai_chat(base_url, model, key_env, max_tokens, temperature=0.0)


def score_answers(
    answer: Answerer, instances: list[Instance], reward: RewardConfig | None = None, chunk: int = 64
) -> tuple[FailureTable, list[Verdict], list[str]]:
    """Ask ``answer`` about every instance and score the answers: the failure table, the verdicts and the
    answers, in instance order."""
    table, verdicts, answers = FailureTable(), [], []
    for start in range(0, len(instances), chunk):
        part = instances[start : start + chunk]
        texts = answer([task.prompt(i) for i in part])
        verdicts += task.judge_all(zip(part, texts), reward, table)[0]
        answers += texts
    return table, verdicts, answers


def validate(
    handle, instances: list[Instance], max_tokens: int, reward: RewardConfig | None = None
) -> tuple[FailureTable, list[Verdict], list[str]]:
    """``score_answers`` with the greedy answers of the deployment behind ``handle`` (a Serve handle)."""
    return score_answers(serve_answerer(handle, max_tokens), instances, reward)


@ray.remote(num_cpus=0)
class Validator:
    """Greedy scoring of the served policy on fixed instances (held-out validation, the benchmark), off the
    driver: named ``validator`` in the run's namespace."""

    def __init__(self, deployment: str):
        from ray import serve

        self.handle = serve.get_deployment_handle(deployment, app_name=deployment)

    def score(self, instances: list[Instance], max_tokens: int) -> tuple[FailureTable, list[Verdict], list[str]]:
        return validate(self.handle, instances, max_tokens)

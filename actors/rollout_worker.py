"""Rollout worker: sample instances, ask the Serve deployment for G samples each, score, hand to the buffer.

Instances and sampling seeds derive from (config seed, round, step, worker id): a worker that is
restarted and retried draws exactly the batch it would have drawn, and the buffer replaces the
duplicate, so nothing is counted twice.
"""

from __future__ import annotations

import ray
from ray import serve

from actors.level_replay import ReplaySet
from actors.timing import Stages
from actors.trajectory import RolloutSummary, TrajectoryBatch
from env import task
from env.config import EnvConfig
from env.evaluate import RewardConfig, regret
from env.generator import derive_seed, make_instance, sample_specs
from env.instance import Instance
from env.locate import fault_offset
from env.stats import FailureTable, features
from serving.deployment import generate_chat
from serving.settings import SamplingConfig


def build_batch(
    instances: list[Instance], results: list[dict], reward: RewardConfig, replayed: list[bool] | None = None
) -> tuple[TrajectoryBatch, FailureTable]:
    """Score every sample of every instance (through the task API): the trajectory batch and its failure
    table."""
    batch = TrajectoryBatch(
        instance_ids=[i.id for i in instances],
        features=[features(i) for i in instances],
        levels=[i.model_dump(mode="json") for i in instances],
        replayed=replayed or [False] * len(instances),
    )
    pairs = []
    for group, (instance, result) in enumerate(zip(instances, results)):
        for sample in result["samples"]:
            pairs.append((instance, sample["text"]))
            batch.group.append(group)
            batch.prompt_ids.append(result["prompt_token_ids"])
            batch.response_ids.append(sample["token_ids"])
            batch.logprobs.append(sample["logprobs"])
            batch.finish_reason.append(sample["finish_reason"])
            batch.text.append(sample["text"])
            batch.weight_version.append(result["weight_version"])
    verdicts, table = task.judge_all(pairs, reward)
    batch.reward = [v.reward for v in verdicts]
    batch.valid = [v.valid for v in verdicts]
    batch.optimal = [v.optimal for v in verdicts]
    batch.failure = [v.failure for v in verdicts]
    batch.fault_char = [fault_offset(text, v) for (_, text), v in zip(pairs, verdicts)]
    batch.regret = [regret(v, instance.optimal_makespan) for (instance, _), v in zip(pairs, verdicts)]
    return batch, table


@ray.remote
class RolloutWorker:
    def __init__(self, worker_id: int, deployment: str, buffer, reward: RewardConfig):
        self.worker_id = worker_id
        self.handle = serve.get_deployment_handle(deployment, app_name=deployment)
        self.buffer = buffer
        self.reward = reward

    def collect(
        self,
        env: EnvConfig,
        round_index: int,
        step: int,
        global_step: int,
        prompts: int,
        sampling: SamplingConfig,
        attempt: int = 0,
        replay: ReplaySet | None = None,
    ) -> RolloutSummary:
        """Draw ``prompts`` instances of step ``step`` of round ``round_index`` (``attempt`` > 0: a refill of
        groups without signal, drawn with seeds of its own; ``replay``: the round's replay levels, mixed in),
        sample, score, and add the batch to the buffer under ``global_step``; returns its summary (counts and
        the time of each stage)."""
        stages = Stages()
        parts = (round_index, step, self.worker_id) + (("refill", attempt) if attempt else ())
        with stages("sample"):
            specs = sample_specs(env, prompts, *parts)
            instances = [r.instance for r in map(make_instance, specs) if r.instance is not None]
            replayed = None
            if replay is not None:
                instances, replayed = replay.mix(instances, derive_seed(env.seed, *parts, "replay"))
        with stages("generate"):
            seed = derive_seed(env.seed, *parts, "sampling")
            results = generate_chat(
                self.handle, [task.messages(i) for i in instances], sampling.model_copy(update={"seed": seed})
            )
        with stages("score"):
            batch, table = build_batch(instances, results, self.reward, replayed)
        summary = batch.summarize(self.worker_id, len(specs) - len(instances), stages.seconds)
        ray.get(self.buffer.add.remote(global_step, self.worker_id, batch, table, summary, attempt))
        return summary

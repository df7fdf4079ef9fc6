"""Rollout worker: sample instances, ask the Serve deployment for G samples each, score, hand to the buffer.

Instances and sampling seeds derive from (config seed, round, step, worker id): a worker that is
restarted and retried draws exactly the batch it would have drawn, and the buffer replaces the
duplicate, so nothing is counted twice.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from typing import Any

import ray
from ray import serve

from env.config import EnvConfig
from env.evaluate import RewardConfig, evaluate
from env.generator import derive_seed, make_instance, sample_specs
from env.prompt import render_prompt
from env.stats import FailureTable, features
from serving.deployment import generate_chat

TRAJECTORY_FIELDS = (
    "group",  # index of the sample's instance in the batch (its GRPO group)
    "prompt_ids",
    "response_ids",
    "logprobs",  # behaviour logprobs of the response tokens
    "reward",
    "valid",
    "optimal",
    "failure",
    "finish_reason",
    "weight_version",
    "instance",  # instance id
)


def build_batch(instances, results: list[dict], reward: RewardConfig) -> tuple[dict[str, Any], FailureTable]:
    """Score every sample of every instance: a trajectory batch (lists, one entry per sample) and its
    failure table."""
    table = FailureTable()
    batch: dict[str, list] = {key: [] for key in TRAJECTORY_FIELDS}
    for group, (instance, result) in enumerate(zip(instances, results)):
        for sample in result["samples"]:
            verdict = evaluate(instance, sample["text"], reward)
            table.add(instance, verdict)
            batch["group"].append(group)
            batch["prompt_ids"].append(result["prompt_token_ids"])
            batch["response_ids"].append(sample["token_ids"])
            batch["logprobs"].append(sample["logprobs"])
            batch["reward"].append(verdict.reward)
            batch["valid"].append(verdict.valid)
            batch["optimal"].append(verdict.optimal)
            batch["failure"].append(verdict.failure)
            batch["finish_reason"].append(sample["finish_reason"])
            batch["weight_version"].append(result["weight_version"])
            batch["instance"].append(instance.id)
    batch["features"] = [features(instance) for instance in instances]
    return batch, table


def digest(batch: dict[str, Any]) -> dict[str, str]:
    """Short hashes of a batch's instances (ids and prompts) and of its sampled responses."""
    instances = json.dumps([batch["instance"], batch["prompt_ids"]]).encode()
    responses = json.dumps(batch["response_ids"]).encode()
    return {
        "instances": hashlib.sha256(instances).hexdigest()[:16],
        "responses": hashlib.sha256(responses).hexdigest()[:16],
    }


@ray.remote
class RolloutWorker:
    def __init__(self, worker_id: int, deployment: str, buffer, reward: dict):
        self.worker_id = worker_id
        self.handle = serve.get_deployment_handle(deployment, app_name=deployment)
        self.buffer = buffer
        self.reward = RewardConfig(**reward)

    def collect(
        self, env: dict, round_index: int, step: int, global_step: int, prompts: int, sampling: dict
    ) -> dict[str, Any]:
        """Draw ``prompts`` instances of step ``step`` of round ``round_index``, sample, score, and add the
        batch to the buffer under ``global_step``; returns counts and the time of each part."""
        config = EnvConfig.model_validate(env)
        started = time.perf_counter()
        specs = sample_specs(config, prompts, round_index, step, self.worker_id)
        instances = [r.instance for r in map(make_instance, specs) if r.instance is not None]
        sampled = time.perf_counter()
        conversations = [[{"role": "user", "content": render_prompt(i)}] for i in instances]
        seed = derive_seed(config.seed, round_index, step, self.worker_id, "sampling")
        results = generate_chat(self.handle, conversations, sampling | {"seed": seed})
        generated = time.perf_counter()
        batch, table = build_batch(instances, results, self.reward)
        scored = time.perf_counter()
        summary = {
            "worker": self.worker_id,
            "instances": len(instances),
            "skipped": len(specs) - len(instances),
            "samples": len(batch["reward"]),
            "response_tokens": sum(map(len, batch["response_ids"])),
            "reward_sum": sum(batch["reward"]),
            "valid": sum(batch["valid"]),
            "optimal": sum(batch["optimal"]),
            "failures": dict(Counter(f for f in batch["failure"] if f)),
            "weight_versions": sorted(set(batch["weight_version"])),
            "digest": digest(batch),
            "times": {"sample": sampled - started, "generate": generated - sampled, "score": scored - generated},
        }
        ray.get(self.buffer.add.remote(global_step, self.worker_id, batch, table.to_dict(), summary))
        return summary

"""Warm start: supervised fine-tuning on solver demonstrations with the same learner group as GRPO.

Demonstrations are generated instances of ``sft.env``: the chat prompt the policy sees in rollouts and,
as the target, the solver's optimal plan in the answer format followed by end-of-turn. Held-out
instances of the same distribution (none equal to a training layout) are answered greedily by the
served policy before and after, so the gain is measured on the real serving path.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import ray

from actors.demonstrations import demonstrations, layout
from actors.learner import start_policy
from actors.settings import TrainConfig, run_namespace
from actors.validation import validate
from env.generator import derive_seed, generate
from env.instance import Instance


def held_out(config: TrainConfig, train: list[Instance]) -> list[Instance]:
    """Validation instances of the SFT distribution whose layouts do not occur in ``train``."""
    count = config.sft.validation_instances
    if count == 0:
        return []
    env = config.sft.env.model_copy(
        update={"seed": derive_seed(config.sft.env.seed, "held-out"), "num_instances": 4 * count}
    )
    seen = {layout(i) for i in train}
    candidates, _ = generate(env, "sft-val")
    return [i for i in candidates if layout(i) not in seen][:count]


def run_sft(config: TrainConfig, out: str | Path, deployment: str = "sft", progress=None) -> dict[str, Any]:
    """Train ``config.model`` on demonstrations, save it to ``out`` (HF format) and report the validation
    valid/optimal rates before and after. Needs a running Ray."""
    from transformers import AutoTokenizer

    from serving.deployment import registry_name_of, undeploy

    sft = config.sft
    started = time.perf_counter()
    instances, _ = generate(sft.env, "sft")
    validation = held_out(config, instances)
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    data = demonstrations(instances, tokenizer, "paths" if sft.thinking else None)
    max_tokens = max(map(len, data.response_ids)) + 16

    deployment = config.app_name(deployment)
    namespace = run_namespace(f"{config.label}-sft" if config.label else "sft")
    sft_config = config.model_copy(update={"grpo": config.grpo.model_copy(update={"kl_coef": 0.0})})  # no reference
    policy, learners = start_policy(sft_config, deployment, sft.learning_rate, namespace, sft.warmup_steps)
    report: dict[str, Any] = {"demonstrations": len(instances), "validation_instances": len(validation)}
    report["before"] = validate(policy.handle, validation, max_tokens)[0].summary() if validation else None
    rng = random.Random(derive_seed(config.seed, "sft-order"))
    losses = []
    try:
        order = list(range(len(instances)))
        batches = [order[i : i + sft.batch_size] for i in range(0, len(order), sft.batch_size)]
        steps = sft.epochs * len(batches)
        for epoch in range(sft.epochs):
            rng.shuffle(order)
            for start in range(0, len(order), sft.batch_size):
                rows = order[start : start + sft.batch_size]
                stats = learners.call("train_sft", [ray.put(data.rows(rows))])
                losses.append(stats["loss"])
                if progress:
                    progress(len(losses), steps, epoch, stats["loss"])
        Path(out).mkdir(parents=True, exist_ok=True)
        learners.call("save_model", str(Path(out).resolve()))
        learners.call("publish", registry_name_of(deployment), 1, policy.config.num_replicas, 600.0)
        report["after"] = validate(policy.handle, validation, max_tokens)[0].summary() if validation else None
    finally:
        learners.shutdown()
        undeploy(deployment)
    report |= {"steps": len(losses), "loss_first": losses[0], "loss_last": losses[-1], "losses": losses}
    report["seconds"] = time.perf_counter() - started
    (Path(out) / "sft_report.json").write_text(json.dumps(report, indent=1))
    return report

"""TRL's ``GRPOTrainer`` on CPU: the throughput peer of ``benchmarks/rl_throughput.py``.

One optimizer step is one generation round: ``prompts_per_step`` prompts x ``group_size`` samples generated with
transformers ``generate`` (no vLLM), scored by the project's evaluator, then trained on in ``prompts_per_step``
micro-batches of one prompt group each (gradient accumulation), fp32, no reference model unless ``beta`` > 0. The
first step is a warm-up; the next ``steps`` are timed with callback timestamps, generation included.

    PYTHONPATH=. python benchmarks/trl_peer.py    # smoke run on the tiny model
"""

from __future__ import annotations

import time
from typing import Any


def run_trl_grpo(
    model_path: str,
    prompts: list[str],
    instances: list,
    group_size: int,
    prompts_per_step: int,
    max_tokens: int,
    steps: int,
    temperature: float = 1.0,
    learning_rate: float = 1e-6,
    seed: int = 0,
    threads: int = 2,
    out_dir: str = "/tmp/trl-peer",
    bf16: bool = False,
    beta: float = 0.0,
) -> dict:
    """Time ``steps`` GRPO optimizer steps (after one untimed warm-up step) of TRL on ``model_path``.

    Returns steps, samples (completions generated in the timed steps), seconds, samples_per_s, seconds_per_step,
    and generate_s / train_s: the timed steps' time in TRL's rollout (generate and score) and the rest.
    """
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from env.evaluate import RewardConfig, evaluate

    torch.set_num_threads(threads)
    reward_config = RewardConfig()

    def mapf_reward(completions: list[Any], instance_index: list[int], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [evaluate(instances[i], text, reward_config).reward for i, text in zip(instance_index, texts)]

    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p}], "instance_index": i} for i, p in enumerate(prompts)]
    )
    config = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=bf16,  # mixed precision (autocast) over float32 weights
        report_to=[],
        disable_tqdm=True,
        model_init_kwargs={"dtype": torch.float32},
        use_vllm=False,
        num_generations=group_size,
        # steps_per_generation defaults to gradient_accumulation_steps, so the generation batch is
        # group_size * prompts_per_step completions: exactly one optimizer step's worth.
        per_device_train_batch_size=group_size,
        gradient_accumulation_steps=prompts_per_step,
        max_completion_length=max_tokens,
        temperature=temperature,
        learning_rate=learning_rate,
        beta=beta,  # KL to a frozen reference (0: none is loaded)
        seed=seed,
        logging_steps=1,
        save_strategy="no",
        max_steps=steps + 1,
    )

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.begin = 0.0
            self.durations: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.durations.append(time.perf_counter() - self.begin)

    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model_path, reward_funcs=mapf_reward, args=config, train_dataset=dataset, callbacks=[timer]
    )

    # Rollout time per optimizer step (generation happens once per step, inside its first micro-batch).
    rollout_s: dict[int, float] = {}
    rollout = trainer._generate_and_score_completions

    def timed_rollout(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return rollout(*args, **kwargs)
        finally:
            step = trainer.state.global_step
            rollout_s[step] = rollout_s.get(step, 0.0) + time.perf_counter() - start

    trainer._generate_and_score_completions = timed_rollout
    trainer.train()

    timed = timer.durations[1:]
    seconds = sum(timed)
    samples = len(timed) * prompts_per_step * group_size
    generate_s = sum(rollout_s.get(step, 0.0) for step in range(1, len(timer.durations)))
    return {
        "steps": len(timed),
        "samples": samples,
        "seconds": seconds,
        "samples_per_s": samples / seconds if seconds else 0.0,
        "seconds_per_step": seconds / len(timed) if timed else 0.0,
        "generate_s": generate_s,
        "train_s": seconds - generate_s,
    }


if __name__ == "__main__":
    import tempfile

    from env.config import default_config
    from env.generator import generate
    from env.prompt import render_prompt
    from serving.model import PRESETS, init_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = init_model(f"{tmp}/model", PRESETS["tiny"])
        smoke_instances, _ = generate(default_config(num_agents=2, num_instances=16, seed=0))
        result = run_trl_grpo(
            str(model_dir),
            [render_prompt(i) for i in smoke_instances],
            smoke_instances,
            group_size=4,
            prompts_per_step=4,
            max_tokens=48,
            steps=3,
            out_dir=f"{tmp}/trl",
        )
    print(result)

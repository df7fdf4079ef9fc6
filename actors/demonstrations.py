"""Solver demonstrations as training data, shared by the warm start (SFT) and pretraining.

A demonstration is the chat prompt the policy sees in rollouts and, as the target, the solver's plan in
the answer format (optionally after a think block) followed by end-of-turn. Layouts (size, holes, starts,
goals) identify an instance's board: training data never shares one with an evaluation suite.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from actors.trajectory import SFTBatch
from env.instance import Instance
from env.prompt import THINKING_STYLES, format_answer, render_prompt

Layout = tuple[int, str, str, str]


def layout(instance: Instance) -> Layout:
    """The board an instance is played on: size, holes, starts and goals."""
    return instance.size, str(instance.holes), str(instance.starts), str(instance.goals)


def suite_layouts() -> set[Layout]:
    """Layouts of every shipped evaluation suite (validation and benchmark)."""
    from env.benchmark import SUITES
    from env.instance import iter_instances

    return {layout(i) for suite in SUITES.values() for i in iter_instances(suite.path)}


def answer_text(instance: Instance, thinking: str | None) -> str:
    """The target answer: ``thinking`` is None or a style of ``env.prompt.THINKING_STYLES``."""
    think = THINKING_STYLES[thinking](instance, instance.solution) if thinking else None
    return format_answer(instance.solution, think)


def chat_prompt(tokenizer, instance: Instance) -> str:
    """The prompt exactly as the engine renders it for the policy."""
    messages = [{"role": "user", "content": render_prompt(instance)}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def demonstrations(instances: Iterable[Instance], tokenizer, thinking: str | None = "paths") -> SFTBatch:
    """Prompt token ids (as the engine tokenizes the chat prompt) and answer token ids (+ end-of-turn)."""
    prompt_ids, response_ids = [], []
    for instance in instances:
        prompt_ids.append(tokenizer(chat_prompt(tokenizer, instance))["input_ids"])
        answer = answer_text(instance, thinking) + tokenizer.eos_token
        response_ids.append(tokenizer(answer, add_special_tokens=False)["input_ids"])
    return SFTBatch(prompt_ids, response_ids)


def length_grouped_batches(lengths: list[int], max_tokens: int, seed: int, pool: int = 64) -> list[list[int]]:
    """Batches of example indices, each at most ``max_tokens`` once padded to its longest example.

    The order is shuffled by ``seed``; within pools of ``pool`` x (examples per batch) examples of similar
    length go together, so padding wastes little; then the batches themselves are shuffled."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    mean = max(1, sum(lengths) // max(1, len(lengths)))
    chunk = max(1, pool * max(1, max_tokens // mean))
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batch: list[int] = []
        for i in part:
            if batch and (len(batch) + 1) * max(lengths[i], lengths[batch[-1]]) > max_tokens:
                batches.append(batch)
                batch = []
            batch.append(i)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches

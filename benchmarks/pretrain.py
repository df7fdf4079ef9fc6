"""Pretraining throughput: our loop vs a plain torch hand loop, side by side in one run, and MFU.

Same model (a preset, randomly initialised), same demonstrations (the base recipe's task family with the
think block), same precision (bf16 autocast, fp32 master weights), same AdamW:

* **ours**: ``actors.pretrain``'s step: length-grouped batches of at most ``--batch-tokens`` tokens,
  loss on the answer only, the forward under ``torch.compile``;
* **plain torch** (the named peer): a hand loop over shuffled batches of a fixed number of examples
  (the same mean batch size), padded to the longest, the whole sequence's loss, no compile.

Throughput counts real (non-pad) tokens per second. MFU is the achieved training FLOP/s (6 x parameters x
tokens/s) over the bf16 matmul peak measured in the same run. With ``--generation`` the shipped model is
also served (Ray Serve + vLLM, bf16) and compared with transformers ``generate`` (benchmarks/generation.py).

    python benchmarks/pretrain.py [--preset base] [--steps 12] [--generation models/base-v1]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed_steps(step, batches, warmup: int) -> tuple[float, int]:
    """Seconds and real tokens of ``batches`` after the first ``warmup`` (compile, allocator warm-up)."""
    seconds, tokens = 0.0, 0
    for k, batch in enumerate(batches):
        start = time.perf_counter()
        real = step(batch)
        if k >= warmup:
            seconds += time.perf_counter() - start
            tokens += real
    return seconds, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per side (after 3 warm-up steps)")
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--instances", type=int, default=3000)
    parser.add_argument("--generation", default=None, help="a model folder to serve and compare with HF generate")
    args = parser.parse_args()

    import tempfile

    import torch

    from actors.demonstrations import demonstrations, length_grouped_batches
    from actors.pretrain import (
        CorpusConfig,
        PretrainConfig,
        build_corpus,
        collate_packed,
        loss_and_count,
        tokenizer_texts,
    )
    from serving.model import PRESETS, build_model, build_tokenizer, count_parameters

    config = PretrainConfig(preset=args.preset, corpus=CorpusConfig(instances=args.instances, held_out=0))
    with tempfile.TemporaryDirectory() as folder:
        train, _ = build_corpus(config, Path(folder))
    tokenizer = build_tokenizer(config.vocab_size, tokenizer_texts(train, "plan"), planner=True)
    data = demonstrations(train, tokenizer, "plan")
    prompts, responses = data.prompt_ids, data.response_ids
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    pad = tokenizer.pad_token_id
    warmup, total = 3, 3 + args.steps
    ours_batches = length_grouped_batches(lengths, args.batch_tokens, seed=0)[:total]
    per_batch = round(sum(map(len, ours_batches)) / len(ours_batches))
    order = list(range(len(lengths)))
    random.Random(0).shuffle(order)
    plain_batches = [order[k * per_batch : (k + 1) * per_batch] for k in range(total)]

    from benchmarks.peak import matmul_peak_gflops

    peak = matmul_peak_gflops()
    print(f"bf16 matmul peak ({torch.get_num_threads()} threads): {peak:,.0f} GFLOP/s")
    print(f"{len(train)} demonstrations, mean {sum(lengths) / len(lengths):.0f} tokens; {per_batch} examples a batch")

    def fresh():
        torch.manual_seed(0)
        model = build_model(PRESETS[args.preset], tokenizer)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))

    def ours_step_factory():
        model, optimizer = fresh()
        forward = torch.compile(model, dynamic=True)

        def step(rows):
            ids, labels = collate_packed(prompts, responses, rows, pad, "answer")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, count = loss_and_count(forward, ids, labels)
            (loss / count).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return sum(lengths[i] for i in rows)

        return model, step

    def plain_step_factory():
        model, optimizer = fresh()

        def step(rows):
            sequences = [prompts[i] + responses[i] for i in rows]
            width = max(map(len, sequences))
            ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences])
            mask = (ids != pad).long()
            labels = ids.masked_fill(mask == 0, -100)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return int(mask.sum())

        return model, step

    rows = []
    for name, factory, batches in (
        ("plain torch", plain_step_factory, plain_batches),
        ("ours", ours_step_factory, ours_batches),
    ):
        model, step = factory()
        parameters = count_parameters(model)
        seconds, tokens = timed_steps(step, batches, warmup)
        rows.append((name, parameters, tokens / seconds, seconds / args.steps))
    plain = rows[0][2]
    print(f"\n{'loop':<12} {'params':>11} {'tokens/s':>9} {'s/step':>7} {'vs plain':>9} {'MFU':>6}")
    for name, parameters, speed, step_s in rows:
        mfu = 6 * parameters * speed / (peak * 1e9)
        print(f"{name:<12} {parameters:>11,} {speed:>9,.0f} {step_s:>7.2f} {speed / plain:>8.2f}x {100 * mfu:>5.1f}%")
    print("targets: ours >= plain torch; MFU >= 25%")

    if args.generation:
        from benchmarks.generation import compare_generation

        compare_generation([args.generation], "bfloat16")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())

"""Pretraining a base policy on solver demonstrations over the whole task family, in one process.

``envengineer model pretrain --preset P --out DIR [--resume]``: the corpus (2..5 agents, sizes 3..10, holes
0..0.3, WAIT-needing instances) is generated deterministically from ``PretrainConfig``, with no layout in
common with the shipped suites or the held-out slice; the model's own tokenizer is trained on it; the
model trains in bf16 autocast (fp32 master weights, AdamW, cosine schedule) with the loss on the answer
only (think block, answer, end-of-turn) over length-grouped batches. Checkpoints every ``every_steps``
hold the model, optimizer and step, so ``--resume`` continues the same curve; the held-out slice is
answered greedily along the way, and ``curves.png`` plots loss and held-out valid rate by step.

Out folder: ``config.yaml``, ``data/`` (corpus, held-out slice), ``tokenizer/``, ``checkpoints/step-N``,
``metrics.jsonl`` (one line per logged step), ``heldout.jsonl``, ``curves.png`` and ``model/`` (the final
Hugging Face folder, bf16 safetensors).
"""

from __future__ import annotations

import json
import math
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from actors.demonstrations import Layout, demonstrations, layout, length_grouped_batches, suite_layouts
from actors.metrics import read_metrics
from env.config import MAX_SIZE, MIN_SIZE
from env.generator import InstanceSpec, derive_seed, make_instances
from env.instance import Instance, read_instances, write_instances
from serving.hardware import Precision, resolve_precision, slow_bf16_warning


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CorpusConfig(_Config):
    """The demonstrations: agent counts and sizes drawn by weight, hole levels and WAIT share uniform."""

    instances: int = Field(120_000, ge=1, description="training instances (before removing suite layouts)")
    agents: dict[int, float] = Field(default_factory=lambda: {2: 0.25, 3: 0.35, 4: 0.25, 5: 0.15})
    sizes: dict[int, float] = Field(
        default_factory=lambda: {3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0, 8: 1.0, 9: 1.0, 10: 1.0},
        description="weight of each map size 3..10 (sizes below the agent count are skipped)",
    )
    hole_levels: list[float] = Field(default_factory=lambda: [0.0, 0.1, 0.2, 0.3])
    wait_share: float = Field(0.3, ge=0.0, le=1.0, description="share of instances that must need a WAIT")
    thinking: str | None = Field("plan", description="think block style (env.prompt.THINKING_STYLES) or null")
    held_out: int = Field(96, ge=0, description="held-out instances scored along the way (same family)")
    workers: int = Field(2, ge=1, description="processes generating the corpus")


class OptimConfig(_Config):
    steps: int = Field(2000, ge=1)
    batch_tokens: int = Field(8192, ge=64, description="tokens per batch, padding included")
    learning_rate: float = Field(1.5e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine schedule ends at this share of the peak")
    warmup_steps: int = Field(150, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    loss: str = Field("answer", pattern="^(answer|all)$", description="answer: loss on the response only")
    precision: Precision = Field("native", description="bf16 autocast, fp32, or native: bf16 where it is native")
    threads: int = Field(0, ge=0, description="torch threads (0 = all cores)")
    compile: bool = Field(True, description="torch.compile the training forward (about 1.3x on CPU)")


class PretrainConfig(_Config):
    preset: str = Field("base", description="serving.model.PRESETS name")
    seed: int = Field(0, ge=0, description="corpus, initialisation and batch order")
    vocab_size: int = Field(1024, ge=300)
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    log_every: int = Field(10, ge=1)
    eval_every: int = Field(800, ge=1, description="steps between held-out scorings")
    checkpoint_every: int = Field(100, ge=1)
    keep_checkpoints: int = Field(4, ge=1)
    max_new_tokens: int = Field(256, ge=16, description="greedy answer length for the held-out slice")

    @classmethod
    def load(cls, path: str | Path) -> PretrainConfig:
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})


# ----------------------------------------------------------------------------------------------
# The corpus


def corpus_specs(config: PretrainConfig, salt: str, count: int) -> list[InstanceSpec]:
    """``count`` instance specs of the task family, seeded by (salt, config seed, index)."""
    import random

    corpus = config.corpus
    rng = random.Random(derive_seed(salt, config.seed, "draws"))
    agent_counts, agent_weights = zip(*sorted(corpus.agents.items()))
    specs = []
    for index in range(count):
        agents = rng.choices(agent_counts, agent_weights)[0]
        sizes = [s for s in range(max(MIN_SIZE, agents), MAX_SIZE + 1) if corpus.sizes.get(s, 0) > 0]
        size = rng.choices(sizes, [corpus.sizes[s] for s in sizes])[0]
        specs.append(
            InstanceSpec(
                id=f"{salt}/a{agents}/s{size:02d}/{index:06d}",
                size=size,
                num_agents=agents,
                hole_ratio=rng.choice(corpus.hole_levels),
                want_wait=rng.random() < corpus.wait_share,
                seed=derive_seed(salt, config.seed, index),
            )
        )
    return specs


def build_corpus(config: PretrainConfig, out: Path, progress=None) -> tuple[list[Instance], list[Instance]]:
    """Training and held-out instances (written once to ``out/data``, read back on resume). Neither shares
    a layout with the shipped suites; training shares none with the held-out slice."""
    data = out / "data"
    train_path, held_path = data / "train.jsonl", data / "heldout.jsonl"
    if train_path.exists() and held_path.exists():
        return read_instances(train_path), read_instances(held_path)
    excluded: set[Layout] = suite_layouts()

    def draw(salt: str, count: int, exclude: set[Layout]) -> list[Instance]:
        results = make_instances(corpus_specs(config, salt, count), config.corpus.workers, progress)
        return [r.instance for r in results if r.instance is not None and layout(r.instance) not in exclude]

    held = draw("pretrain-heldout", config.corpus.held_out, excluded)
    train = draw("pretrain", config.corpus.instances, excluded | {layout(i) for i in held})
    write_instances(held, held_path)
    write_instances(train, train_path.with_suffix(".tmp"))
    train_path.with_suffix(".tmp").rename(train_path)
    return train, held


def tokenizer_texts(instances: list[Instance], thinking: str | None, limit: int = 8000) -> list[str]:
    from actors.demonstrations import answer_text
    from env.prompt import render_prompt

    texts = []
    for instance in instances[:limit]:
        texts += [render_prompt(instance), answer_text(instance, thinking)]
    return texts


# ----------------------------------------------------------------------------------------------
# Training


def learning_rate(optim: OptimConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` of the peak at ``optim.steps``."""
    if step < optim.warmup_steps:
        return optim.learning_rate * (step + 1) / optim.warmup_steps
    progress = min(1.0, (step - optim.warmup_steps) / max(1, optim.steps - optim.warmup_steps))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return optim.learning_rate * (optim.min_lr_ratio + (1 - optim.min_lr_ratio) * cosine)


class Batches:
    """The step -> batch map: epoch ``e`` is ``length_grouped_batches`` with seed (config seed, e), so any
    step's batch is known without replaying the ones before it (resume needs no data state)."""

    def __init__(self, lengths: list[int], max_tokens: int, seed: int):
        self.lengths, self.max_tokens, self.seed = lengths, max_tokens, seed
        self._epochs: dict[int, list[list[int]]] = {}
        self.per_epoch = len(self.epoch(0))

    def epoch(self, e: int) -> list[list[int]]:
        if e not in self._epochs:
            self._epochs = {e: length_grouped_batches(self.lengths, self.max_tokens, derive_seed(self.seed, e))}
        return self._epochs[e]

    def __getitem__(self, step: int) -> list[int]:
        return self.epoch(step // self.per_epoch)[step % self.per_epoch]


def collate_packed(prompt_ids: list[list[int]], response_ids: list[list[int]], rows: list[int], pad_id: int, loss: str):
    """Right-padded input ids and labels (-100 where no loss) of ``rows``; with right padding and causal
    attention no mask is needed (a real token never sees a pad)."""
    import torch

    sequences = [prompt_ids[i] + response_ids[i] for i in rows]
    width = max(map(len, sequences))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for r, i in enumerate(rows):
        seq = sequences[r]
        ids[r, : len(seq)] = torch.tensor(seq)
        first = len(prompt_ids[i]) if loss == "answer" else 1
        labels[r, first : len(seq)] = torch.tensor(seq[first:])
    return ids, labels


def loss_and_count(model, ids, labels):
    """Summed next-token cross-entropy over labelled positions, and their count."""
    import torch.nn.functional as F

    logits = model(input_ids=ids).logits[:, :-1].float()
    target = labels[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100, reduction="sum")
    return loss, int((target != -100).sum())


def greedy_scores(model, tokenizer, instances: list[Instance], max_new_tokens: int, batch: int = 32) -> dict:
    """Greedy answers (transformers ``generate``) to ``instances``: valid/optimal rates overall and by
    agent count, and the verdicts' failure categories."""
    import torch

    from actors.demonstrations import chat_prompt
    from env.evaluate import evaluate

    verdicts = []
    tokenizer.padding_side = "left"
    model.eval()
    with torch.no_grad(), _autocast(model):
        for start in range(0, len(instances), batch):
            part = instances[start : start + batch]
            enc = tokenizer(
                [chat_prompt(tokenizer, i) for i in part], return_tensors="pt", padding=True, add_special_tokens=False
            )
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            verdicts += [evaluate(i, t) for i, t in zip(part, texts)]
    model.train()
    by_agents: dict[str, list[bool]] = {}
    failures: dict[str, int] = {}
    for instance, verdict in zip(instances, verdicts):
        by_agents.setdefault(str(instance.num_agents), []).append(verdict.valid)
        if verdict.failure:
            failures[verdict.failure] = failures.get(verdict.failure, 0) + 1
    n = max(1, len(verdicts))
    return {
        "valid": sum(v.valid for v in verdicts) / n,
        "optimal": sum(v.optimal for v in verdicts) / n,
        "valid_by_agents": {a: sum(v) / len(v) for a, v in sorted(by_agents.items())},
        "failures": failures,
    }


def _autocast(model):
    import torch

    dtype = getattr(model, "_envengineer_autocast", None)
    return torch.autocast(
        "cpu" if model.device.type == "cpu" else model.device.type, dtype=dtype, enabled=dtype is not None
    )


def _save_checkpoint(folder: Path, model, optimizer, step: int, keep: int) -> None:
    import torch

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp / "state.pt")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    for old in _checkpoints(folder.parent)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _checkpoints(folder: Path) -> list[Path]:
    done = [
        p for p in folder.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp") and (p / "state.pt").exists()
    ]
    return sorted(done, key=lambda p: int(p.name.split("-")[1]))


def pretrain(
    config: PretrainConfig,
    out: str | Path,
    resume: bool = False,
    progress: Callable[..., None] | None = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Run (or continue, with ``resume``) pretraining into ``out``; returns the final held-out scores.
    ``progress(event, **values)`` is told about corpus building, each logged step and each scoring.
    ``stop_after``: return after this many steps of this call (tests use it to simulate an interruption)."""
    import torch

    from serving.model import PRESETS, build_model, build_tokenizer, save_bf16

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not resume:
        raise FileExistsError(f"{out} is not empty: pass --resume to continue it, or choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "config.yaml"
    if resume and config_path.exists():
        saved = PretrainConfig.load(config_path)
        if saved.model_dump(exclude={"optim": {"threads"}}) != config.model_dump(exclude={"optim": {"threads"}}):
            raise ValueError(f"{config_path} differs from the given config: resume with the same settings")
    config_path.write_text(yaml.safe_dump(config.model_dump(), sort_keys=False))
    if config.optim.threads:
        torch.set_num_threads(config.optim.threads)
    notify = progress or (lambda *a, **k: None)

    def counted(results):
        for done, result in enumerate(results, 1):
            if done % 1000 == 0:
                notify("corpus", done=done, total=config.corpus.instances + config.corpus.held_out)
            yield result

    train, held = build_corpus(config, out, counted)
    notify("corpus-ready", instances=len(train), held_out=len(held))
    spec = PRESETS[config.preset]
    tokenizer_dir = out / "tokenizer"
    if not (tokenizer_dir / "tokenizer.json").exists():
        tokenizer = build_tokenizer(config.vocab_size, tokenizer_texts(train, config.corpus.thinking), planner=True)
        tokenizer.model_max_length = spec.max_positions
        tokenizer.save_pretrained(tokenizer_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    data = demonstrations(train, tokenizer, config.corpus.thinking)
    lengths = [len(p) + len(r) for p, r in zip(data.prompt_ids, data.response_ids)]
    batches = Batches(lengths, config.optim.batch_tokens, derive_seed("pretrain-order", config.seed))

    from dataclasses import replace

    model = build_model(replace(spec, seed=config.seed), tokenizer)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.optim.learning_rate, weight_decay=config.optim.weight_decay, betas=(0.9, 0.95)
    )
    forward = torch.compile(model, dynamic=True) if config.optim.compile else model
    step = 0
    checkpoints = out / "checkpoints"
    found = _checkpoints(checkpoints) if resume else []
    if found:
        state = torch.load(found[-1] / "state.pt", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    metrics_path, heldout_path = out / "metrics.jsonl", out / "heldout.jsonl"
    _truncate_jsonl(metrics_path, step)
    _truncate_jsonl(heldout_path, step)
    precision = resolve_precision(config.optim.precision, model.device.type)
    if warning := slow_bf16_warning(precision, model.device.type):
        warnings.warn(warning, stacklevel=2)
    model._envengineer_autocast = torch.bfloat16 if precision == "bf16" else None
    model.train()
    pad = tokenizer.pad_token_id
    optim = config.optim
    window = {"loss": 0.0, "count": 0, "tokens": 0, "seconds": 0.0}
    started_at = step
    while step < optim.steps:
        tic = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(optim, step)
        rows = batches[step]
        ids, labels = collate_packed(data.prompt_ids, data.response_ids, rows, pad, optim.loss)
        with _autocast(model):
            loss_sum, count = loss_and_count(forward, ids, labels)
        (loss_sum / max(count, 1)).backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), optim.grad_clip))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        window["loss"] += float(loss_sum.detach())
        window["count"] += count
        window["tokens"] += sum(lengths[i] for i in rows)
        window["seconds"] += time.perf_counter() - tic
        if step % config.log_every == 0 or step == optim.steps:
            record = {
                "step": step,
                "epoch": (step - 1) / batches.per_epoch,
                "loss": window["loss"] / max(window["count"], 1),
                "lr": learning_rate(optim, step - 1),
                "grad_norm": grad_norm,
                "tokens_per_s": window["tokens"] / max(window["seconds"], 1e-9),
                "seconds": window["seconds"],
            }
            _append_jsonl(metrics_path, record)
            notify("step", **record, steps=optim.steps)
            window = {"loss": 0.0, "count": 0, "tokens": 0, "seconds": 0.0}
        if step % config.eval_every == 0 or step == optim.steps:
            scores = greedy_scores(model, tokenizer, held, config.max_new_tokens)
            _append_jsonl(heldout_path, {"step": step} | scores)
            notify("heldout", step=step, **scores)
        if step % config.checkpoint_every == 0 or step == optim.steps:
            _save_checkpoint(checkpoints / f"step-{step}", model, optimizer, step, config.keep_checkpoints)
        if stop_after is not None and step - started_at >= stop_after:
            return {"step": step, "stopped": True}
    final = out / "model"
    save_bf16(model, tokenizer, final, spec)
    plot_curves(out)
    last = read_metrics(heldout_path)
    return {"step": step, "heldout": last[-1] if last else None, "model": str(final)}


def export_checkpoint(run: str | Path, dest: str | Path, step: int | None = None) -> Path:
    """Write a checkpoint of the pretraining run ``run`` (the newest, or ``step``) as a Hugging Face folder
    (bf16) at ``dest``: to look at a run before it ends, or to pick a point of its curve."""
    import torch
    from transformers import AutoTokenizer

    from serving.model import PRESETS, build_model, save_bf16

    run = Path(run)
    config = PretrainConfig.load(run / "config.yaml")
    found = _checkpoints(run / "checkpoints")
    chosen = [c for c in found if step is None or c.name == f"step-{step}"]
    if not chosen:
        raise FileNotFoundError(f"no checkpoint {'step-' + str(step) if step else ''} in {run / 'checkpoints'}")
    tokenizer = AutoTokenizer.from_pretrained(run / "tokenizer")
    spec = PRESETS[config.preset]
    model = build_model(spec, tokenizer)
    model.load_state_dict(torch.load(chosen[-1] / "state.pt", weights_only=True)["model"])
    return save_bf16(model, tokenizer, dest, spec)


def _append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")


def _truncate_jsonl(path: Path, step: int) -> None:
    """Drop records after ``step`` (written after the checkpoint a resume starts from)."""
    rows = [r for r in read_metrics(path) if r["step"] <= step]
    if path.exists():
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def plot_curves(out: str | Path) -> Path:
    """``curves.png``: training loss and held-out valid rate (overall and by agent count) by step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    metrics, held = read_metrics(out / "metrics.jsonl"), read_metrics(out / "heldout.jsonl")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot([m["step"] for m in metrics], [m["loss"] for m in metrics])
    left.set(xlabel="step", ylabel="answer loss (nats/token)", yscale="log", title="training loss")
    steps = [h["step"] for h in held]
    right.plot(steps, [100 * h["valid"] for h in held], "k-o", label="all")
    for agents in sorted({a for h in held for a in h["valid_by_agents"]}):
        right.plot(steps, [100 * h["valid_by_agents"].get(agents, 0) for h in held], "--", label=f"{agents} agents")
    right.set(xlabel="step", ylabel="valid %", title="held-out greedy valid rate")
    right.legend()
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

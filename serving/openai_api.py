"""OpenAI-compatible request/response shapes for ``/v1/completions``, ``/v1/chat/completions`` and
``/v1/models`` (the subset the project and common clients use; unknown request fields are ignored)."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.settings import SamplingConfig


class APIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = Field(None, description="completion tokens (default 256)")
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=64)
    seed: int | None = Field(None, ge=0)
    stop: str | list[str] | None = None

    def sampling(self) -> SamplingConfig:
        max_tokens = 256 if self.max_tokens is None else self.max_tokens
        if max_tokens < 1:
            raise APIError(400, f"max_tokens must be at least 1 (got {max_tokens})", param="max_tokens")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingConfig(
            n=self.n, temperature=self.temperature, top_p=self.top_p, max_tokens=max_tokens, seed=self.seed, stop=stop
        )


class CompletionRequest(_Request):
    prompt: str | list[str]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: dict[str, Any] | None = None

    def schema_or_none(self) -> dict[str, Any] | None:
        if self.type == "json_object":
            return {"type": "object"}
        if self.type == "json_schema":
            if not self.json_schema or "schema" not in self.json_schema:
                raise APIError(400, "response_format.json_schema.schema is required", param="response_format")
            return self.json_schema["schema"]
        return None


class ChatRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    response_format: ResponseFormat | None = None

    def sampling(self) -> SamplingConfig:
        if self.max_tokens is None and self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return super().sampling()


def _usage(results: list[dict]) -> dict[str, int]:
    prompt = sum(len(r["prompt_token_ids"]) for r in results)
    completion = sum(len(s["token_ids"]) for r in results for s in r["samples"])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _envelope(prefix: str, kind: str, model: str, choices: list[dict], results: list[dict]) -> dict[str, Any]:
    """The fields every completion response shares; the weight version goes in ``system_fingerprint``."""
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(results),
        "system_fingerprint": f"weights-v{results[0]['weight_version']}",
    }


def completion_response(model: str, results: list[dict]) -> dict[str, Any]:
    choices = []
    for result in results:
        for sample in result["samples"]:
            choices.append(
                {
                    "index": len(choices),
                    "text": sample["text"],
                    "finish_reason": sample["finish_reason"],
                    "logprobs": None,
                }
            )
    return _envelope("cmpl", "text_completion", model, choices, results)


def chat_response(model: str, result: dict) -> dict[str, Any]:
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": sample["text"]},
            "finish_reason": sample["finish_reason"],
            "logprobs": None,
        }
        for i, sample in enumerate(result["samples"])
    ]
    return _envelope("chatcmpl", "chat.completion", model, choices, [result])


def models_response(model: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "envengineer"}]}

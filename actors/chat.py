"""Chat clients for the policy's Serve deployment and for any OpenAI-compatible endpoint, one shape for
both: ``chat(prompts, json_schema=None) -> answers`` (one user message per prompt)."""

from __future__ import annotations

import os
from collections.abc import Callable

Chat = Callable[..., list[str]]


def serve_chat(handle, max_tokens: int, temperature: float) -> Chat:
    """Answers of a Serve deployment of this project (one batched call), under the JSON schema if given."""
    sampling = {"n": 1, "temperature": temperature, "max_tokens": max_tokens}

    def chat(prompts: list[str], json_schema: dict | None = None) -> list[str]:
        conversations = [[{"role": "user", "content": p}] for p in prompts]
        from serving.deployment import generate_chat

        results = generate_chat(handle, conversations, sampling, json_schema)
        return [r["samples"][0]["text"] for r in results]

    return chat


def openai_chat(base_url: str, model: str, key_env: str, max_tokens: int, temperature: float) -> Chat:
    """Answers of an OpenAI-compatible endpoint (one request per prompt); the key comes from ``key_env``."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=os.environ.get(key_env, "none"))

    def chat(prompts: list[str], json_schema: dict | None = None) -> list[str]:
        extra = {}
        if json_schema is not None:
            extra["response_format"] = {"type": "json_schema", "json_schema": {"name": "config", "schema": json_schema}}
        answers = []
        for prompt in prompts:
            response = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                temperature=temperature,
                **extra,
            )
            answers.append(response.choices[0].message.content or "")
        return answers

    return chat

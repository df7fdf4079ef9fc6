"""Serving commands: ``model init`` (build the tiny default policy) and ``serve`` (the policy on Ray Serve)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console(stderr=True)
model_app = typer.Typer(help="Build the default policy model.", no_args_is_help=True)


@model_app.command("init")
def model_init(
    out: Annotated[Path, typer.Option(help="Folder for the model (Hugging Face format).")],
    preset: Annotated[str, typer.Option(help="tiny (~0.5M parameters) or 50m.")] = "tiny",
    hidden_size: Annotated[int | None, typer.Option(help="Override the preset's hidden size.")] = None,
    layers: Annotated[int | None, typer.Option(help="Override the number of layers.")] = None,
    heads: Annotated[int | None, typer.Option(help="Override the number of attention heads.")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="Override the number of key/value heads.")] = None,
    intermediate_size: Annotated[int | None, typer.Option(help="Override the MLP width.")] = None,
    vocab_size: Annotated[int | None, typer.Option(help="Largest tokenizer vocabulary to train.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random initialisation.")] = 0,
) -> None:
    """Build a Qwen3-architecture causal LM (random init) and its own byte-level BPE tokenizer, trained
    on testbed prompts and answers, with no download; saved so transformers and vLLM load it."""
    from dataclasses import replace

    from serving.model import PRESETS, count_parameters, init_model

    if preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r} ({', '.join(PRESETS)})")
    overrides = {
        "hidden_size": hidden_size,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "intermediate_size": intermediate_size,
        "vocab_size": vocab_size,
    }
    spec = replace(PRESETS[preset], seed=seed, **{k: v for k, v in overrides.items() if v is not None})
    init_model(out, spec)
    from transformers import AutoModelForCausalLM

    parameters = count_parameters(AutoModelForCausalLM.from_pretrained(out))
    console.print(f"wrote {out}: {parameters:,} parameters")


def serve(
    model: Annotated[Path, typer.Option(help="Local Hugging Face model folder.")],
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8000,
    host: Annotated[str, typer.Option(help="HTTP host (loopback unless you mean otherwise).")] = "127.0.0.1",
    name: Annotated[str, typer.Option(help="Model name on the OpenAI route.")] = "policy",
    replicas: Annotated[int, typer.Option(help="Serve replicas.")] = 1,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16, float16 or auto.")] = "float32",
    max_model_len: Annotated[int, typer.Option(help="Context length.")] = 4096,
    kv_cache_gib: Annotated[float, typer.Option(help="CPU only: KV cache size in GiB.")] = 1.0,
) -> None:
    """Serve a policy through vLLM on Ray Serve with an OpenAI-compatible API
    (/v1/models, /v1/completions, /v1/chat/completions); blocks until interrupted.

    Uses the Ray cluster in RAY_ADDRESS if set, else starts a local one (dashboard on 127.0.0.1)."""
    import ray

    from serving.deployment import deploy, start_serve
    from serving.settings import ServingConfig

    config = ServingConfig(
        model=str(model.resolve()),
        served_name=name,
        num_replicas=replicas,
        dtype=dtype,
        max_model_len=max_model_len,
        cpu_kv_cache_gib=kv_cache_gib,
    )
    external = bool(os.environ.get("RAY_ADDRESS"))
    if external:
        ray.init()
    else:
        ray.init(address="local", dashboard_host="127.0.0.1", include_dashboard=False)
    start_serve(host, port)
    console.print(f"starting {replicas} replica(s) of {model} ...")
    policy = deploy(config, name=name)
    console.print(f"serving {name!r} at http://{host}:{port}/v1 (Ctrl-C to stop)", highlight=False)
    print(f"READY http://{host}:{port}/v1", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops it like Ctrl-C
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        if external:  # leave the cluster as it was; a local one ends with this process
            from serving.deployment import undeploy

            undeploy(policy.name)
        ray.shutdown()


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
    app.command()(serve)

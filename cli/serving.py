"""Model and serving commands: ``model init`` (a random policy), ``model pretrain`` (a base policy trained on
solver demonstrations) and ``serve`` (the policy on Ray Serve)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from cli.common import console, fail

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


@model_app.command("pretrain")
def model_pretrain(
    out: Annotated[Path, typer.Option(help="Output folder (corpus, tokenizer, checkpoints, curves, model/).")],
    preset: Annotated[str | None, typer.Option(help="Model preset (tiny, small, base); default: the config's.")] = None,
    config: Annotated[Path | None, typer.Option(help="Pretraining YAML (default: the shipped base-v1 recipe).")] = None,
    steps: Annotated[int | None, typer.Option(help="Override the number of optimizer steps.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest checkpoint in --out.")] = False,
) -> None:
    """Pretrain a base policy on solver demonstrations over the whole task family (2..5 agents, sizes
    3..10, holes 0..0.3, WAIT-needing instances), in bf16 on this machine, with its own tokenizer.
    Checkpoints as it goes; --resume continues the same run."""
    from pydantic import ValidationError
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from actors.pretrain import PretrainConfig, pretrain
    from serving.model import PRESETS

    try:
        settings = PretrainConfig.load(config) if config else PretrainConfig()
    except (OSError, ValidationError, ValueError) as error:
        raise typer.BadParameter(f"{config}: {error}") from None
    if preset is not None:
        settings = settings.model_copy(update={"preset": preset})
    if steps is not None:
        settings = settings.model_copy(update={"optim": settings.optim.model_copy(update={"steps": steps})})
    if settings.preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {settings.preset!r} ({', '.join(PRESETS)})")
    bar = Progress(
        TextColumn("{task.description} step {task.completed}/{task.total}"),
        BarColumn(),
        TextColumn("loss {task.fields[loss]:.4f}  {task.fields[speed]:,.0f} tok/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    task = bar.add_task("pretrain", total=settings.optim.steps, loss=float("nan"), speed=0.0)

    def progress(event: str, **values) -> None:
        if event == "corpus":
            bar.update(task, description=f"corpus {values['done']}/{values['total']}")
        elif event == "corpus-ready":
            bar.update(task, description="pretrain")
            console.print(f"corpus: {values['instances']} training and {values['held_out']} held-out instances")
        elif event == "step":
            bar.update(task, completed=values["step"], loss=values["loss"], speed=values["tokens_per_s"])
            if not console.is_terminal and values["step"] % 100 == 0:
                console.print(f"step {values['step']}/{values['steps']} loss {values['loss']:.4f}")
        elif event == "heldout":
            by = ", ".join(f"{a} agents {v:.0%}" for a, v in values["valid_by_agents"].items())
            console.print(f"step {values['step']}: held-out valid {values['valid']:.1%} ({by})")

    try:
        with bar:
            result = pretrain(settings, out, resume=resume, progress=progress)
    except (FileExistsError, ValueError) as error:
        raise fail(str(error)) from None
    console.print(f"wrote {result['model']} after {result['step']} steps; curves in {out / 'curves.png'}")


@model_app.command("ship")
def model_ship(
    out: Annotated[Path, typer.Option(help="The model folder to write (e.g. models/base-v1).")],
    run: Annotated[Path | None, typer.Option(help="A pretraining run folder to export.")] = None,
    model: Annotated[Path | None, typer.Option(help="Or: a model folder to score and describe.")] = None,
    step: Annotated[
        int | None, typer.Option(help="Export this checkpoint step of --run (default: its final model).")
    ] = None,
    per_cell: Annotated[int, typer.Option(help="Benchmark instances per (agents, size, wait) cell.")] = 10,
    rebuild: Annotated[str, typer.Option(help="The command that rebuilds the model, for the card.")] = "",
    rl_run: Annotated[
        Path | None, typer.Option(help="Or: an RL run folder (envengineer run, a sweep trial): its last checkpoint.")
    ] = None,
) -> None:
    """Score a model greedily through a Serve deployment on the shipped suites and write its scores.json
    and MODEL_CARD.md (data, recipe, budget, per-size tables, sha256). Starts a local Ray unless RAY_ADDRESS."""
    from actors.model_card import ship
    from cli.training import connect_ray

    if sum(source is not None for source in (run, model, rl_run)) != 1:
        raise typer.BadParameter("give exactly one of --run, --model and --rl-run")
    connect_ray(1)
    try:
        scores = ship(out, run, model, step, per_cell, rebuild, log=console.print, rl_run=rl_run)
    except FileNotFoundError as error:
        raise fail(str(error)) from None
    from actors.model_card import markdown_table

    print(markdown_table(scores["benchmark"]))
    console.print(f"wrote {out / 'MODEL_CARD.md'}")


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

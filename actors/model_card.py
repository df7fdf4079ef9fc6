"""Shipping a policy: its scores on the shipped suites, measured through the deployment, and its card.

``envengineer model ship --run RUN --out models/NAME`` exports a pretraining run's model (``--rl-run``: an RL
run's last checkpoint; ``--model``: any model folder), scores it greedily through a Serve deployment (the
benchmark at ``per_cell`` instances per (agents, size, wait) cell, the 2-agent validation split, and a small
smoke slice that the tests replay), and writes ``scores.json`` and ``MODEL_CARD.md`` beside the weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from actors.metrics import read_metrics
from env.benchmark import BENCHMARK, VALIDATION, Suite, checksum, score
from env.markdown import md_head, md_row, size_table

# The smoke slice: small enough for a test to replay through the deployment in seconds.
SMOKE = {"suite": "validation", "agents": [2, 3], "sizes": [3, 4, 5], "per_cell": 1}


def smoke_instances():
    from actors.validation import suite_instances

    return suite_instances(VALIDATION, SMOKE["agents"], SMOKE["per_cell"], SMOKE["sizes"])


def score_suites(answer, per_cell: int, log=print) -> dict[str, Any]:
    """Greedy scores of ``answer`` (an ``actors.validation.Answerer``) on the benchmark (3..5 agents, at most
    ``per_cell`` per cell), the 2-agent validation split and the smoke slice."""
    from actors.validation import score_answers, suite_instances

    def table(suite: Suite, agents: list[int], cap: int | None) -> dict:
        instances = suite_instances(suite, agents, cap)
        log(f"scoring {len(instances)} {suite.name} instances ({agents} agents)")
        _, verdicts, _ = score_answers(answer, instances)
        return score(instances, {v.id: v for v in verdicts}).to_dict() | {"instances": len(instances)}

    smoke = smoke_instances()
    _, verdicts, _ = score_answers(answer, smoke)
    return {
        "benchmark": table(BENCHMARK, list(BENCHMARK.agent_counts), per_cell) | {"per_cell": per_cell},
        "validation_2_agents": table(VALIDATION, [2], None),
        "smoke": SMOKE | {"valid": [v.id for v in verdicts if v.valid], "instances": len(smoke)},
    }


def markdown_table(scores: dict) -> str:
    """The paper's table (acc./opt. per size, Sum) from ``score(...).to_dict()``'s form."""
    sizes = sorted({int(s) for row in scores.values() if isinstance(row, dict) for s in row.get("sizes", {})})
    rows = []
    for agents, row in sorted((a, r) for a, r in scores.items() if a.isdigit()):
        cells = {s: f"{c['acc']:.1f}/{c['opt']:.1f}" for s, c in row["sizes"].items()}  # keys: "3".."10"
        total = f"{row['sum']['acc']:.2f}/{row['sum']['opt']:.2f}"
        rows.append((agents, [cells.get(str(s), "-") for s in sizes], total))
    return "\n".join(size_table(sizes, rows))


def write_card(
    model: Path,
    scores: dict,
    run: Path | None,
    rebuild: str,
    name: str,
    step: int | None = None,
    rl_run: Path | None = None,
) -> Path:
    """``MODEL_CARD.md`` of the model folder ``model`` from its ``scores`` and the pretraining ``run`` (up to
    its checkpoint ``step``, default the end), or the RL run ``rl_run`` that trained it from a base."""
    import yaml

    spec = json.loads((model / "envengineer_model.json").read_text())
    config = yaml.safe_load((run / "config.yaml").read_text()) if run else None
    last = step if step is not None else float("inf")
    metrics = [m for m in read_metrics(run / "metrics.jsonl") if m["step"] <= last] if run else []
    held = [h for h in read_metrics(run / "heldout.jsonl") if h["step"] <= last] if run else []
    parameters = _parameters(model)
    lines = [
        f"# {name}",
        "",
        f"A Qwen3-architecture causal LM ({parameters / 1e6:.1f}M parameters: hidden {spec['hidden_size']}, "
        f"{spec['num_layers']} layers, {spec['num_heads']} heads / {spec['num_kv_heads']} KV heads, MLP "
        f"{spec['intermediate_size']}), bf16 safetensors, with its own byte-level BPE tokenizer "
        f"({_vocab(model)} tokens). It answers MAPF-FrozenLake prompts (`env.prompt.render_prompt`) with a "
        "think block (the holes as cells, then every agent's path as cells) and the plan in the answer format. "
        "transformers and vLLM load the folder as it is.",
        "",
        f"sha256 of `model.safetensors`: `{checksum(model / 'model.safetensors')}`",
        "",
        "## Rebuild",
        "",
        "```bash",
        rebuild,
        "```",
        "",
    ]
    if config:
        corpus, optim = config["corpus"], config["optim"]
        tokens = sum(m["tokens_per_s"] * m["seconds"] for m in metrics)
        seconds = sum(m["seconds"] for m in metrics)
        # the first interval after each (re)start also holds torch.compile and the corpus: the rate leaves it out
        median = sorted(m["tokens_per_s"] for m in metrics)[len(metrics) // 2] if metrics else 0.0
        steady = [m for m in metrics if m["tokens_per_s"] > median / 2]
        rate = sum(m["tokens_per_s"] * m["seconds"] for m in steady) / max(sum(m["seconds"] for m in steady), 1e-9)
        lines += (
            [
                "## Data",
                "",
                f"{corpus['instances']:,} solver demonstrations drawn (seed {config['seed']}) over agent counts "
                f"{corpus['agents']} (weights), map sizes {sorted(corpus['sizes'])} (weights {corpus['sizes']}), "
                f"hole ratios {corpus['hole_levels']}, {corpus['wait_share']:.0%} needing a WAIT; every layout "
                "(size, holes, starts, goals) of the validation and benchmark suites and of the "
                f"{corpus['held_out']}-instance held-out slice removed. The tokenizer is trained on this corpus only.",
                "",
                "## Recipe and budget",
                "",
                (
                    f"{step:,} AdamW steps (checkpoint {step:,} of a {optim['steps']:,}-step schedule)"
                    if step is not None and step < optim["steps"]
                    else f"{optim['steps']:,} AdamW steps"
                )
                + f" of at most {optim['batch_tokens']:,} tokens (length-grouped batches), "
                f"peak learning rate {optim['learning_rate']:g}, {optim['warmup_steps']} warm-up steps, cosine to "
                f"{optim['min_lr_ratio']:g} of the peak, weight decay {optim['weight_decay']:g}, clipping "
                f"{optim['grad_clip']:g}; loss on the {optim['loss']} tokens; {optim['precision']} autocast "
                f"(fp32 master weights){', torch.compile' if optim.get('compile') else ''}. "
                f"{tokens / 1e6:.1f}M training tokens in {seconds / 3600:.2f} h on a 2-core CPU, start-up, compilation "
                f"and held-out scoring included ({rate:,.0f} tokens/s while training); final training loss "
                f"{metrics[-1]['loss']:.4f}."
                if metrics
                else "",
                "",
                "![learning curves](curves.png)",
                "",
                "Held-out greedy valid rate along the way (transformers `generate`, bf16):",
                "",
                *md_head(["step", "valid", "optimal", *(f"{a} agents" for a in held[-1]["valid_by_agents"])]),
            ]
            if held
            else []
        )
        for h in held:
            by = [f"{100 * v:.0f}%" for v in h["valid_by_agents"].values()]
            lines.append(md_row([str(h["step"]), f"{100 * h['valid']:.1f}%", f"{100 * h['optimal']:.1f}%", *by]))
        lines.append("")
    if rl_run is not None:
        lines += rl_section(rl_run)
    bench, validation, smoke = scores["benchmark"], scores["validation_2_agents"], scores["smoke"]
    lines += [
        "## Scores (greedy, through the Serve deployment; acc./opt. in %, Sum = mean over sizes)",
        "",
        f"Benchmark suite, the first {bench['per_cell']} instances of every (agents, size, wait) cell "
        f"({bench['instances']} instances):",
        "",
        markdown_table(bench),
        "",
        f"Validation split, 2 agents ({validation['instances']} instances):",
        "",
        markdown_table(validation),
        "",
        f"Smoke slice (validation, {smoke['agents']} agents, sizes {smoke['sizes']}, first instance per cell; "
        f"replayed by tests/test_shipped_models.py): {len(smoke['valid'])} of {smoke['instances']} valid.",
        "",
    ]
    path = model / "MODEL_CARD.md"
    path.write_text("\n".join(lines))
    return path


def rl_section(rl_run: Path) -> list[str]:
    """The card's account of an RL run (``envengineer run`` / a sweep trial): base, recipe, validation per round."""
    import yaml

    from actors.run_dir import RunDir, read_json

    folder = RunDir(rl_run)
    config = yaml.safe_load(folder.run_config.read_text())
    grpo, env = config["grpo"], config.get("env") or {}
    steps = [m for m in read_metrics(folder.metrics) if "train" in m]
    rates = [read_json(r.validation)["summary"]["valid_rate"] for r in folder.rounds(validated=True)]
    sizes = sorted(int(size) for size in env.get("sizes", {})) or "a random legal configuration"
    lines = [
        "## RL run",
        "",
        f"GRPO from `{config['model']}` (the run's whole config: `rl_config.yaml`): {config['rounds']} rounds x "
        f"{grpo['steps_per_round']} steps of {grpo['prompts_per_step']} instances x {grpo['group_size']} samples "
        f"({len(steps)} steps run), learning rate {grpo['learning_rate']:g}, `credit: {grpo['credit']}`, "
        f"up to {grpo['refill']} refills a step, temperature {grpo['temperature']:g}, KL {grpo['kl_coef']:g}; "
        f"engineer `{config['engineer']['backend']}`; round 0 on {env.get('num_agents', config['train_agents'])}-agent "
        f"boards of sizes {sizes}; seed {config['seed']}.",
        "",
    ]
    if rates:
        lines += [
            "Greedy 2-agent validation rate after each round: " + " -> ".join(f"{100 * r:.1f}%" for r in rates) + ".",
            "",
        ]
    return lines


def _parameters(model: Path) -> int:
    import math

    from safetensors import safe_open

    with safe_open(model / "model.safetensors", "np") as handle:
        return sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())


def _vocab(model: Path) -> int:
    return len(json.loads((model / "tokenizer.json").read_text())["model"]["vocab"])


def ship(
    out: str | Path,
    run: str | Path | None = None,
    model: str | Path | None = None,
    step: int | None = None,
    per_cell: int = 10,
    rebuild: str = "",
    log=print,
    rl_run: str | Path | None = None,
) -> dict:
    """Export ``run`` (at ``step``, default its final model), or the last checkpoint of the RL run ``rl_run``,
    or copy ``model`` into ``out``; score it through a Serve deployment (needs Ray) and write ``scores.json``,
    ``MODEL_CARD.md`` and the run's curves."""
    import yaml

    from actors.checkpoint import final_model
    from actors.pretrain import export_checkpoint
    from actors.validation import serve_answerer
    from serving.deployment import deploy, undeploy
    from serving.settings import ServingConfig

    out = Path(out)
    run = Path(run) if run else None
    if run is not None:
        final = run / "model"
        if step is None and final.exists():
            shutil.copytree(final, out, dirs_exist_ok=True)
        else:
            export_checkpoint(run, out, step)
        for name in ("curves.png",):
            if (run / name).exists():
                shutil.copy(run / name, out / name)
        shutil.copy(run / "config.yaml", out / "pretrain_config.yaml")
    elif model is not None and Path(model).resolve() != out.resolve():
        shutil.copytree(model, out, dirs_exist_ok=True)
    elif rl_run is not None:
        rl_run = Path(rl_run)
        policy = final_model(rl_run)
        if policy is None:
            raise FileNotFoundError(f"{rl_run} holds no checkpoint to ship")
        shutil.copytree(policy, out, dirs_exist_ok=True)
        shutil.copy(rl_run / "run_config.yaml", out / "rl_config.yaml")
        base = Path(yaml.safe_load((rl_run / "run_config.yaml").read_text())["model"])
        shutil.copy(base / "envengineer_model.json", out / "envengineer_model.json")  # the architecture is the base's
    name = f"ship-{out.name}"
    policy = deploy(ServingConfig(model=str(out.resolve()), max_model_len=4096, dtype="auto"), name, f"/{name}", False)
    try:
        scores = score_suites(serve_answerer(policy.handle, 1024), per_cell, log)
    finally:
        undeploy(name)
    (out / "scores.json").write_text(json.dumps(scores, indent=1))
    if not rebuild:
        if run:
            source = f"--run {run}" + (f" --step {step}" if step is not None else "")
        else:
            source = f"--rl-run {rl_run}" if rl_run else f"--model {model}"
        rebuild = f"envengineer model ship {source} --out {out} --per-cell {per_cell}"
    write_card(out, scores, run, rebuild, out.name, step, rl_run)
    return scores

"""The default policy: a tiny Qwen3-architecture causal LM and its own tokenizer, built locally.

No download: the tokenizer is a byte-level BPE trained with ``tokenizers`` on text the testbed produces
(prompts and answers of generated instances) plus a chat template; the model is randomly initialised.
Both are saved in Hugging Face format (config.json, model.safetensors, generation_config.json,
tokenizer.json, tokenizer_config.json), so transformers and vLLM load the folder like any checkpoint.
Any other local Hugging Face causal-LM folder (e.g. a Qwen3-0.6B snapshot) works as the policy by path.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

BOS, EOS, PAD = "<|bos|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = [PAD, BOS, "<|im_start|>", EOS]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ModelSpec:
    """Size of a locally built policy."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    vocab_size: int = 1024
    max_positions: int = 4096
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


PRESETS = {
    "tiny": ModelSpec(),  # ~0.6M parameters: fast tests
    # Pretrained base policies (``envengineer model pretrain``), sized for CPU training in bf16.
    "small": ModelSpec(hidden_size=256, num_layers=6, num_heads=4, num_kv_heads=2, intermediate_size=768),
    "base": ModelSpec(hidden_size=384, num_layers=8, num_heads=6, num_kv_heads=2, intermediate_size=1152),
    "50m": ModelSpec(hidden_size=640, num_layers=10, num_heads=10, num_kv_heads=5, intermediate_size=1920),
}


def training_corpus() -> list[str]:
    """Prompts and solver answers (with a short think block) of the shipped validation and benchmark
    instances: 2..5 agents on every size. Only the tokenizer sees them."""
    from env.benchmark import BENCHMARK, VALIDATION
    from env.instance import read_instances
    from env.prompt import format_answer, render_prompt

    texts = []
    for suite in (VALIDATION, BENCHMARK):
        for instance in read_instances(suite.path):
            texts.append(render_prompt(instance))
            texts.append(format_answer(instance.solution, thinking="Plan each agent, then check conflicts."))
    return texts


# Pieces the planner tokenizer never merges with their neighbours, so each is (at most) one token that
# the model can match by content: a cell "(r, c)", a move with its comma, a map square.
PLANNER_PIECES = r" ?\(\d+, \d+\)| ?(?:UP|DOWN|LEFT|RIGHT|WAIT),?| [.H](?=[ \n])| [.H]$|\n"


def build_tokenizer(vocab_size: int, texts: list[str], planner: bool = False):
    """A byte-level BPE tokenizer (any text round-trips) wrapped for transformers.

    ``planner``: split off ``PLANNER_PIECES`` first and let BPE merge freely within the rest (the fixed
    rule text becomes a few tokens, a cell or a move one token), instead of splitting at every word."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    if planner:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PLANNER_PIECES), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=PRESETS["tiny"].max_positions,
        clean_up_tokenization_spaces=False,
    )


def build_model(spec: ModelSpec, tokenizer):
    """A randomly initialised Qwen3 causal LM sized by ``spec`` (embedding padded to a multiple of 64)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(spec.seed)
    vocab = -(-len(tokenizer) // 64) * 64
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    return model


def init_model(out: str | Path, spec: ModelSpec = PRESETS["tiny"]) -> Path:
    """Build tokenizer and model and save both to ``out`` (Hugging Face format)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.vocab_size, training_corpus())
    tokenizer.model_max_length = spec.max_positions
    model = build_model(spec, tokenizer)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "envengineer_model.json").write_text(json.dumps(asdict(spec), indent=2))
    return out


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def save_bf16(model, tokenizer, out: str | Path, spec: ModelSpec) -> Path:
    """Save ``model`` as bf16 safetensors with its tokenizer (Hugging Face format) into ``out``."""
    import copy

    import torch

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "envengineer_model.json").write_text(json.dumps(asdict(spec), indent=2))
    return out

"""`native` precision: bf16 where the device computes it natively, fp32 elsewhere (serving/hardware.py)."""

import pytest
import torch

from serving.hardware import native_bf16, resolve_dtype, resolve_precision, slow_bf16_warning


@pytest.fixture(params=[True, False], ids=["amx-cpu", "avx2-cpu"])
def cpu_bf16(request, monkeypatch):
    """Pretend the CPU has (or lacks) AMX; AVX512-BF16 absent either way."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: request.param, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    return request.param


def test_native_resolves_by_the_cpus_bf16_support(cpu_bf16):
    assert native_bf16("cpu") is cpu_bf16
    assert resolve_precision("native", "cpu") == ("bf16" if cpu_bf16 else "fp32")
    assert resolve_dtype("native", "cpu") == ("bfloat16" if cpu_bf16 else "float32")


def test_explicit_values_are_kept_and_emulated_bf16_is_warned_about(cpu_bf16):
    assert resolve_precision("bf16", "cpu") == "bf16" and resolve_precision("fp32", "cpu") == "fp32"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16" and resolve_dtype("auto", "cpu") == "auto"
    for asked in ("bf16", "bfloat16"):
        assert (slow_bf16_warning(asked, "cpu") is None) is cpu_bf16
    assert slow_bf16_warning("fp32", "cpu") is None and slow_bf16_warning("float32", "cpu") is None


def test_a_gpu_without_cuda_is_not_native():
    if not torch.cuda.is_available():
        assert not native_bf16("cuda") and resolve_precision("native", "cuda") == "fp32"


def test_the_configs_take_native_and_deepspeed_gets_the_resolved_precision():
    from actors.learner import deepspeed_config
    from actors.settings import DeepSpeedConfig
    from serving.settings import ServingConfig

    settings = DeepSpeedConfig(precision="native")
    assert ServingConfig(dtype="native").dtype == "native"
    assert deepspeed_config(settings, "bf16", 1e-4, 8)["bf16"] == {"enabled": True}
    assert deepspeed_config(settings, "fp32", 1e-4, 8)["bf16"] == {"enabled": False}
    with pytest.raises(ValueError):
        DeepSpeedConfig(precision="fp16")


def test_a_resumed_run_keeps_the_precision_it_ran_in(tmp_path, cpu_bf16):
    """A run begun where bf16 is not native stays fp32 when resumed on a CPU with AMX, and the reverse."""
    import json

    from actors.job import keep_precision
    from actors.run_dir import RunDir
    from actors.settings import load_run_config

    config = load_run_config("configs/grpo-lift.yaml")  # native for the learners and the engine
    run, lines = RunDir(tmp_path), []
    assert keep_precision(config, run, lines.append) is config  # a first start resolves native where it runs
    first = "fp32" if cpu_bf16 else "bf16"  # the other machine's
    run.learner.write_text(json.dumps({"from_step": 0, "precision": first}) + "\n")
    kept = keep_precision(config, run, lines.append)
    assert kept.deepspeed.precision == first and kept.serving.dtype == {"fp32": "float32", "bf16": "bfloat16"}[first]
    assert kept.grpo == config.grpo and "as the run ran until now" in lines[0]
    explicit = load_run_config(
        "configs/grpo-lift.yaml", assignments=["deepspeed.precision=fp32", "serving.dtype=float32"]
    )
    assert keep_precision(explicit, run, lines.append) is explicit  # an explicit precision is taken as given

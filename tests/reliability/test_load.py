"""The Serve deployment under many concurrent clients, Ray handles (rollout workers, validator) and
OpenAI HTTP clients together: every answer is the one its own prompt gets alone, and a bounded
deployment sheds load it cannot queue with HTTP 503 / BackPressureError instead of queueing forever.
Throughput and tail-latency figures: benchmarks/serve_load.py."""

import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import ray
from ray.serve.exceptions import BackPressureError

from env.prompt import render_prompt
from serving.deployment import deploy, undeploy
from serving.settings import ServingConfig
from tests.reliability.record import record

GREEDY = {"n": 1, "temperature": 0.0, "max_tokens": 24}


def handle_answer(handle, prompt: str) -> str:
    (result,) = handle.generate_chat.remote([[{"role": "user", "content": prompt}]], GREEDY).result()
    return result["samples"][0]["text"]


def http_answer(client: openai.OpenAI, model: str, prompt: str) -> str:
    response = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=GREEDY["max_tokens"], temperature=0
    )
    return response.choices[0].message.content


def test_concurrent_handle_and_http_clients_each_get_their_own_answer(policy, serve_port, small_instances):
    prompts = [render_prompt(instance) for instance in small_instances[:32]]
    alone = [handle_answer(policy.handle, p) for p in prompts]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{serve_port}/fixture/v1", api_key="unused", max_retries=0)

    def ask(k: int) -> str:
        prompt = prompts[k % len(prompts)]
        return handle_answer(policy.handle, prompt) if k % 2 else http_answer(client, "fixture", prompt)

    started = time.monotonic()
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(ask, range(128)))
    seconds = time.monotonic() - started
    mixed = [k for k, answer in enumerate(answers) if answer != alone[k % len(prompts)]]
    assert not mixed, f"{len(mixed)} of 128 answers differ from the prompt's own answer"
    record("128 requests from 64 concurrent clients (handles and OpenAI HTTP)",
           "every answer equals the greedy answer its prompt gets alone; none dropped", None)  # fmt: skip
    print(f"128 requests in {seconds:.1f} s")


@pytest.fixture(scope="module")
def bounded(ray_cluster, tiny_model):
    """A deployment that works on 2 requests at once and queues 2 more per caller."""
    config = ServingConfig(model=tiny_model, served_name="bounded", max_ongoing_requests=2, max_queued_requests=2)
    policy = deploy(config, name="bounded", route_prefix="/bounded", follow_updates=False)
    yield policy
    undeploy("bounded")


def test_a_bounded_deployment_sheds_what_it_cannot_queue(bounded, serve_port, small_instances):
    prompt = render_prompt(small_instances[0])
    alone = handle_answer(bounded.handle, prompt)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{serve_port}/bounded/v1", api_key="unused", max_retries=0)

    def over_http(_) -> str | int:
        try:
            return http_answer(client, "bounded", prompt)
        except openai.APIStatusError as error:
            return error.status_code

    def over_handle(_) -> str | type:
        try:
            return handle_answer(bounded.handle, prompt)
        except BackPressureError:
            return BackPressureError

    with ThreadPoolExecutor(24) as pool:
        http = list(pool.map(over_http, range(24)))
    with ThreadPoolExecutor(24) as pool:
        handles = list(pool.map(over_handle, range(24)))
    for results, rejected in ((http, 503), (handles, BackPressureError)):
        served = [r for r in results if isinstance(r, str)]
        assert set(results) <= {alone, rejected}, set(results) - {alone, rejected}
        assert served and rejected in results, results  # some served, the rest shed at once
        assert len(served) >= 4  # 2 running + 2 queued at least
    assert ray.get([ray.put(0)]) == [0]  # the cluster is still healthy
    shed = handles.count(BackPressureError)
    record("24 simultaneous requests to a deployment bounded at 2 running + 2 queued",
           f"HTTP: {http.count(alone)} served, {http.count(503)} got 503; handles: {handles.count(alone)} served, "
           f"{shed} got BackPressureError; every served answer correct", None)  # fmt: skip

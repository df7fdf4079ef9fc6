"""Generator throughput and suite build time.

1. Instances per second on one core for the 2-agent training distribution (the default config and a
   few random configs), against a named peer measured in the same run: drawing the same layouts without
   solving them (so the ratio shows what solving and the WAIT targeting cost). Target: >= 200/s.
2. Wall time of building the whole evaluation suite (benchmark + validation) with ``--workers``
   processes, written to a temporary folder and checked against the shipped checksums. Target: < 3 min.

    python benchmarks/generator.py [--instances 2000] [--workers 2] [--skip-suite]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from env.benchmark import SUITES, build, checksum  # noqa: E402
from env.config import default_config, random_config  # noqa: E402
from env.generator import _draw, generate, instance_specs  # noqa: E402
from env.instance import write_instances  # noqa: E402


def draw_only(config) -> float:
    """Seconds to draw one layout per instance of ``config`` without solving (the peer)."""
    start = time.perf_counter()
    for spec in instance_specs(config):
        _draw(random.Random(spec.seed), spec)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=2000, help="instances per measured config")
    parser.add_argument("--workers", type=int, default=2, help="processes for the suite build")
    parser.add_argument("--skip-suite", action="store_true")
    args = parser.parse_args()

    configs = {"default (uniform sizes, 20% holes, wait 0.5)": default_config(num_instances=args.instances)}
    for seed in (1, 2):
        configs[f"random config seed {seed}"] = random_config(seed, num_instances=args.instances)
    print(f"{'config':<46} {'inst/s':>8} {'draw-only inst/s':>17} {'ratio':>7} {'shortfalls':>10}")
    for name, config in configs.items():
        start = time.perf_counter()
        instances, report = generate(config)
        seconds = time.perf_counter() - start
        peer = draw_only(config)
        rate, peer_rate = len(instances) / seconds, config.num_instances / peer
        print(f"{name:<46} {rate:>8.0f} {peer_rate:>17.0f} {peer_rate / rate:>6.1f}x {len(report.shortfalls):>10}")
    print("target: >= 200 instances/s on one core")

    if not args.skip_suite:
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            for name, suite in SUITES.items():
                path = Path(folder) / suite.path.name
                write_instances(build(suite, args.workers), path)
                same = checksum(path) == suite.checksum_path.read_text().split()[0]
                print(f"{name}: {len(suite.specs())} instances, identical to the shipped file: {same}")
            seconds = time.perf_counter() - start
        print(
            f"whole suite built in {seconds:.0f} s with {args.workers} workers "
            f"({seconds / 180:.2f} of the 3-minute target)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

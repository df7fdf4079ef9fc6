"""Start a longer sweep from a finished shorter one: copy each trial's run folder (checkpoints included) into
the longer sweep's folder without its benchmark, so that ``envengineer tune LONG.yaml --out DST --resume``
continues every trial from its last checkpoint instead of redoing the rounds both sweeps share.

Only for sweeps that differ in ``rounds`` alone: GRPO's learning rate is constant (no warm-up, no decay) and
every earlier round's records are read back, so the first rounds of the longer run are the shorter run's.

    python scripts/extend_sweep.py SRC_DIR DST_DIR --variant OLD=NEW [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune.spec import shared_start, trial_dir  # noqa: E402


def extend(source: Path, target: Path, old: str, new: str, seeds: list[int]) -> list[Path]:
    """Copy the trials ``old-s<seed>`` of ``source`` to ``new-s<seed>`` of ``target``; returns the copies."""
    copies = []
    for seed in seeds:
        src, dst = trial_dir(source, old, seed), trial_dir(target, new, seed)
        if not src.benchmark.exists():
            raise SystemExit(f"{src.path} has not finished (no {src.benchmark.name}); finish it first")
        if dst.path.exists():
            raise SystemExit(f"{dst.path} exists; remove it or resume the longer sweep as it is")
        skip = shutil.ignore_patterns("tensorboard", "plots", "report.md", "rescore")  # rescore: tune.rescore's
        shutil.copytree(src.path, dst.path, ignore=skip)  # records of the shorter run's final policy
        shutil.rmtree(dst.benchmark.parent)  # the benchmark is taken again after the last round
        copies.append(dst.path)
    start_src, start_dst = shared_start(source), shared_start(target)
    if start_src.path.exists() and not start_dst.path.exists():
        shutil.copytree(start_src.path, start_dst.path)  # the policy every trial starts from, scored once
    return copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="the finished shorter sweep's --out folder")
    parser.add_argument("target", type=Path, help="the longer sweep's --out folder")
    parser.add_argument("--variant", required=True, help="OLD=NEW: the variant's name in each sweep file")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    old, _, new = args.variant.partition("=")
    for path in extend(args.source, args.target, old, new or old, args.seeds):
        print(f"copied to {path}")


if __name__ == "__main__":
    main()

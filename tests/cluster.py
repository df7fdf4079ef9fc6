"""Helpers for tests that need a real Ray cluster or server: each runs in its own session (process group
leader) and is ended by that session's id, so no other Ray on the host is touched."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def session_pids(sid: int) -> list[int]:
    """Processes whose session id is ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    pids.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def end_session(process: subprocess.Popen, grace_s: float = 3.0) -> None:
    """Ask the session leader to stop, then kill whatever is left of its session (a head's ``ray start
    --block`` takes over 20 s to act on SIGTERM: its session is simply killed after ``grace_s``)."""
    sid = process.pid
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    for pid in session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if process.poll() is None:
        process.wait(10)


def use_token_auth(folder: Path) -> None:
    """Token authentication with a fresh token for every Ray process this one starts or connects to."""
    token = folder / "ray_auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)


def start_ray_head(
    temp_dir: Path, num_cpus: int = 4, dashboard_port: int | None = None, metrics_port: int | None = None
) -> tuple[subprocess.Popen, str]:
    """``ray start --head --block`` in a new session with its own temp folder (so the host's default
    ``/tmp/ray`` keeps no pointer to it), the dashboard on 127.0.0.1:``dashboard_port`` if given, the
    node's Prometheus metrics on ``metrics_port`` if given, its dashboard agent on a free port (the default
    52365 is held by any other head on the host, which leaves job submission without an agent), and this
    venv's commands on its PATH (for job entrypoints); returns (process, address) once the head's node is
    registered. On a loaded machine a raylet can die at start, having waited more than Ray's fixed 15 s for
    its dashboard agent (ray-project/ray#65983), while the GCS answers on: the head is started again, up to
    three times."""
    for _ in range(3):
        process, address = _launch_head(temp_dir, num_cpus, dashboard_port, metrics_port)
        if _node_registers(process, address):
            return process, address
        end_session(process)
    raise TimeoutError("the Ray head's node did not register in 3 starts")


def _launch_head(
    temp_dir: Path, num_cpus: int, dashboard_port: int | None, metrics_port: int | None
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [
        str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", f"--num-cpus={num_cpus}",
        f"--temp-dir={temp_dir}", "--dashboard-host=127.0.0.1", f"--dashboard-agent-listen-port={free_port()}",
    ]  # fmt: skip
    if dashboard_port:
        command += ["--include-dashboard=true", f"--dashboard-port={dashboard_port}"]
    else:
        command += ["--include-dashboard=false"]
    if metrics_port:
        command += [f"--metrics-export-port={metrics_port}"]
    environment = os.environ | {"PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment
    )
    return process, f"127.0.0.1:{port}"


def _node_registers(process: subprocess.Popen, address: str, timeout_s: float = 120) -> bool:
    """Whether the head's node shows up as active in ``ray status`` (the GCS answers before the raylet
    registers); False once the head has exited (``ray start --block`` does when its raylet dies)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        probe = subprocess.run([str(BIN / "ray"), "status", f"--address={address}"], capture_output=True, text=True)
        if probe.returncode == 0 and re.search(r"Active:\s*\n\s*\d+ node_", probe.stdout):
            return True
        time.sleep(2)
    return False

"""Process-level simulator tests: real ranks on 127.0.0.10..17, real sockets, real reads.

Every rank is started in its own session (process group) and killed with it at teardown, so its
weight-reader child goes too. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.simulator.weights import make_weights

BASE = "127.0.0.10"  # the built-in sim-8x inventory: node k is 127.0.0.(10+k)
SCALE = "test"


@pytest.fixture(scope="module", autouse=True)
def _ranks_end_with_their_module(no_ranks_left_behind: None) -> None:
    """tests/leaks.py: a rank left running here would fail a later module's boot."""


def addr(rank: int) -> str:
    return f"127.0.0.{10 + rank}"


def free_port(host: str = BASE) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """13 shards, 8 MB: every rank reads ~1 MB per boot at the test scale."""
    path = tmp_path_factory.mktemp("weights") / "model"
    make_weights(path, 8_000_000, 13)
    return path


@dataclass
class RankProc:
    rank: int
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        """Raw: `read_text` would turn tqdm's carriage returns into newlines."""
        return self.log.read_bytes().decode(errors="replace")

    def lines(self) -> list[str]:
        """The log split on \\r and \\n, as the orchestrator's followers split it."""
        return self.text().replace("\r", "\n").split("\n")

    def wait_for(self, needle: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines():
                if needle in line:
                    return line
            if self.proc.poll() is not None:
                time.sleep(0.2)
                for line in self.lines():
                    if needle in line:
                        return line
                raise AssertionError(
                    f"rank {self.rank} exited {self.proc.returncode} without {needle!r}:\n{self.text()}"
                )
            time.sleep(0.05)
        raise AssertionError(f"rank {self.rank}: no {needle!r} within {timeout} s:\n{self.text()}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"rank {self.rank} still running:\n{self.text()}") from None

    def child_pid(self) -> int:
        """The weight reader: this rank's only child process."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
                if children.split():
                    return int(children.split()[0])
            time.sleep(0.05)
        raise AssertionError(f"rank {self.rank} has no child process")


@dataclass
class Cluster:
    """Ranks started by hand, as `cluster boot` will start them but without the orchestrator."""

    tmp: Path
    weights: Path
    ranks: list[RankProc] = field(default_factory=list)

    def argv(self, engine: str, rank: int, n: int, port: int, serve: int) -> list[str]:
        if engine == "sglang":
            argv = [
                "sglang", "serve", "--model-path", str(self.weights),
                "--served-model-name", "mistral-large-4", "--host", addr(0), "--port", str(serve),
                "--tp", str(n), "--nnodes", str(n), "--node-rank", str(rank),
                "--dist-init-addr", f"{BASE}:{port}", "--tokenizer-mode", "mistral",
                "--attention-backend", "dsa", "--moe-runner-backend", "flashinfer_cutlass",
                "--watchdog-timeout", "3600", "--context-length", "524288",
            ]  # fmt: skip
        else:
            argv = [
                "vllm", "serve", str(self.weights), "--served-model-name", "mistral-large-4",
                "--host", addr(0), "--port", str(serve), "--tensor-parallel-size", str(n),
                "--nnodes", str(n), "--node-rank", str(rank), "--master-addr", BASE,
                "--master-port", str(port), "--kv-cache-dtype", "fp8_ds_mla",
                "--enable-expert-parallel", "--gpu-memory-utilization", "0.89",
                "--max-model-len", "524288",
            ]  # fmt: skip
            if rank > 0:
                argv.append("--headless")
        return argv

    def start(
        self,
        engine: str,
        n: int,
        *,
        env: dict[str, str] | None = None,
        rank_env: dict[int, dict[str, str]] | None = None,
        extra: dict[int, list[str]] | None = None,
        only: list[int] | None = None,
        port: int | None = None,
    ) -> tuple[list[RankProc], int]:
        """Start ranks 0..n-1 (or `only` those); returns them and rank 0's serve port."""
        port = port or free_port()
        serve = free_port()
        for rank in only if only is not None else range(n):
            argv = [
                sys.executable,
                "-m",
                "orchestrator.simulator",
                *self.argv(engine, rank, n, port, serve),
            ]
            argv += (extra or {}).get(rank, [])
            full_env = dict(os.environ)
            full_env.update(
                {"CLUSTER_SIM_SCALE": SCALE, "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
            )
            full_env.update(env or {})
            full_env.update((rank_env or {}).get(rank, {}))
            log = self.tmp / f"{engine}-{port}-rank{rank}.log"
            with open(log, "wb") as f:
                proc = subprocess.Popen(
                    argv, stdout=f, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
                )
            self.ranks.append(RankProc(rank, proc, log))
        started = [r for r in self.ranks if r.log.name.startswith(f"{engine}-{port}-")]
        return started, serve

    def kill(self, rank: RankProc, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(rank.proc.pid, sig)

    def stop_all(self) -> None:
        for r in self.ranks:
            self.kill(r, signal.SIGKILL)
        for r in self.ranks:
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.proc.wait(timeout=10)


@pytest.fixture
def cluster(tmp_path: Path, weights: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, weights)
    try:
        yield c
    finally:
        c.stop_all()


def post(url: str, body: dict[str, object], timeout: float = 10.0) -> bytes:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return bytes(response.read())


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""

"""Benchmark: the controller's own cost per followed log line, in-process, no SSH or Docker.

    .venv/bin/python bench/follow_pipeline.py [--lines 200000] [--per-chunk 20] [--json]

Feeds pre-made `docker logs --timestamps` output (SGLang's serving chatter, as
bench/supervisor_logs.py spews it) in chunks of `--per-chunk` lines, the size a 10 ms write
batch arrives in, through exactly the supervisor's path: the transport's stream, the Docker
runtime's `follow`, a `Follower` writing `rank-<k>/stderr.log`, and the supervisor folding the
lines into the boot state. It prints CPU microseconds per line (process time) and the share of
one core that 16,000 lines/s (8 ranks x 2,000) would take. What it leaves out, asyncssh's
decryption and the kernel's socket work, is what bench/supervisor_logs.py adds on the testbed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.models.inventory import Node  # noqa: E402
from orchestrator.runstore import RunStore  # noqa: E402
from orchestrator.runtime.base import RankSpec  # noqa: E402
from orchestrator.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.supervisor.supervise import SuperviseConfig, Supervisor  # noqa: E402
from orchestrator.supervisor.watchers import WatchConfig  # noqa: E402
from orchestrator.transport.base import CommandResult  # noqa: E402
from orchestrator.transport.streams import merged_chunks, merged_lines  # noqa: E402

RATE = 16_000  # lines/s: 8 ranks x 2,000 (issue 7's log-follow target)


def chatter(n: int) -> list[bytes]:
    out = []
    base = time.time()
    for i in range(n):
        t = base + i / 2000
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e9):09d}Z"
        now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
        if i % 50 == 0:
            text = (
                f"[{now} TP0] Loading safetensors checkpoint shards: {i * 100 // n:3d}% "
                f"Completed | {i * 13 // n}/13 [00:04<00:05,  1.31it/s] seq={i}"
            )
        elif i % 7 == 0:
            text = (
                f"[{now} TP0] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, "
                f"token usage: 0.01, #running-req: 7, #queue-req: 0 seq={i}"
            )
        else:
            text = (
                f"[{now} TP0] Decode batch. #running-req: 8, #token: {i % 9000 + 1000}, "
                f"token usage: 0.02, gen throughput (token/s): 412.33, #queue-req: 0 seq={i}"
            )
        out.append(f"{ts} {text}\n".encode())
    return out


class _Reader:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def read(self, n: int = -1) -> bytes:
        await asyncio.sleep(0)  # a real reader yields to the loop between chunks
        return self.chunks.pop(0) if self.chunks else b""


class ReplayTransport:
    """Replays canned stderr chunks for `docker logs -f`; states say the rank has exited."""

    def __init__(self, node: Node, chunks: list[bytes]) -> None:
        self._node = node
        self.chunks = chunks

    @property
    def node(self) -> Node:
        return self._node

    async def connect(self) -> None:
        return None

    async def run(self, argv: Sequence[str], **_: Any) -> CommandResult:
        state = json.dumps({"Status": "exited", "ExitCode": 0, "OOMKilled": False})
        return CommandResult(self._node.name, tuple(argv), 0, state, "", 0.0)

    async def stream(self, argv: Sequence[str]) -> AsyncIterator[Any]:
        async for line in merged_lines(_Reader([]), _Reader(list(self.chunks))):
            yield line

    async def stream_chunks(self, argv: Sequence[str]) -> AsyncIterator[Any]:
        async for chunk in merged_chunks(_Reader([]), _Reader(list(self.chunks))):
            yield chunk

    async def close(self) -> None:
        return None


async def measure(lines: int, per_chunk: int) -> dict[str, float]:
    data = chatter(lines)
    chunks = [b"".join(data[i : i + per_chunk]) for i in range(0, len(data), per_chunk)]
    node = Node(name="bench-node0", address="198.18.0.10", user="u", rank=0, fabric_iface="lo")
    with tempfile.TemporaryDirectory() as tmp:
        run = RunStore(Path(tmp)).create()
        spec = RankSpec(rank=0, node=node, name="bench-r0", argv=("x",))
        runtime = DockerRuntime({node.name: ReplayTransport(node, chunks)})  # type: ignore[dict-item]
        sup = Supervisor(
            run,
            [spec],
            runtime,
            SuperviseConfig(watch=WatchConfig(barrier_window_s=15.0), ready_url=None),
            recipe="bench-follow-pipeline",
        )
        follower = sup.followers[0]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await follower.run(asyncio.Event())
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        follower.close()
        kept = (run.rank_dir(0) / "stderr.log").read_bytes()
    if kept != b"".join(data):
        raise SystemExit("the preserved copy differs from what was fed: the bench is void")
    per_line_us = cpu / lines * 1e6
    return {
        "lines": lines,
        "per_chunk": per_chunk,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "us_per_line": round(per_line_us, 2),
        "core_share_at_16k_lines_s": round(per_line_us * RATE / 1e6, 3),
        "state_rank0_last_line_ok": sup.state.rank(0).last_line == data[-1].decode()[31:-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--per-chunk", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(measure(args.lines, args.per_chunk))
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['lines']} lines in chunks of {result['per_chunk']}: "
        f"{result['us_per_line']} us CPU a line; 16,000 lines/s would take "
        f"{result['core_share_at_16k_lines_s'] * 100:.1f}% of one core (target < 15% "
        "with SSH included: bench/supervisor_logs.py)"
    )


if __name__ == "__main__":
    main()

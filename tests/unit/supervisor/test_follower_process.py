"""Following ranks of the process runtime: raw copies, resume without gaps or duplicates."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime

from orchestrator.models.inventory import Node
from orchestrator.runtime.base import RankSpec
from orchestrator.runtime.process import ProcessRuntime
from orchestrator.supervisor.follower import Follower, split_lines

NODE = Node(name="sim-node0", address="127.0.0.10", user="u", rank=0, fabric_iface="lo")
SCRIPT = "for i in $(seq 1 200); do echo line $i; printf '%s\\r%s\\n' 10% 20%; done; echo oops >&2; exit 3"


def spec(name: str, script: str = SCRIPT) -> RankSpec:
    return RankSpec(rank=0, node=NODE, name=name, argv=("sh", "-c", script))


async def wait_exit(rt: ProcessRuntime, s: RankSpec) -> None:
    for _ in range(100):
        if not (await rt.state(s)).running:
            return
        await asyncio.sleep(0.05)


async def test_a_rank_output_is_kept_raw_with_timestamps_and_its_exit_recorded(tmp_path):
    rt = ProcessRuntime(tmp_path / "nodes")
    s = spec("r0")
    await rt.start(s)
    rank_dir = tmp_path / "rank-0"
    rank_dir.mkdir()
    seen: list[tuple[str, str]] = []
    f = Follower(rt, s, rank_dir, lambda r, st, ts: seen.extend((st, t) for t in ts))
    await asyncio.wait_for(f.run(asyncio.Event()), 30)
    state = await rt.state(s)
    assert (state.status, state.exit_code) == ("exited", 3)
    out = split_lines((rank_dir / "stdout.log").read_bytes())
    assert len(out) == 400
    assert out[0].split(b" ", 1)[1] == b"line 1\n"
    assert out[1].split(b" ", 1)[1] == b"10%\r20%\n"  # tqdm's \r kept inside its line
    assert (rank_dir / "stderr.log").read_bytes().endswith(b" oops\n")
    # stdout and stderr are followed side by side, so only each stream's own order is defined.
    assert [t.split(" ", 1)[1] for st, t in seen if st == "stderr"] == ["oops"]
    assert sum(st == "stdout" for st, _ in seen) == 400
    assert await f.reconcile() == 0
    assert json.loads((rank_dir / "follow.json").read_text())["repaired_bytes"] == 0
    f.close()


async def test_a_new_follower_resumes_from_the_preserved_copy_without_duplicates(tmp_path):
    rt = ProcessRuntime(tmp_path / "nodes")
    s = spec("r1", "for i in $(seq 1 60); do echo line $i; sleep 0.01; done")
    await rt.start(s)
    rank_dir = tmp_path / "rank-0"
    rank_dir.mkdir()
    stop = asyncio.Event()
    first = Follower(rt, s, rank_dir, lambda *a: None)

    async def stop_soon():
        await asyncio.sleep(0.3)
        stop.set()

    await asyncio.gather(first.run(stop), stop_soon())
    first.close()
    kept = (rank_dir / "stdout.log").read_bytes().count(b"\n")
    assert 0 < kept < 60
    await wait_exit(rt, s)
    second = Follower(rt, s, rank_dir, lambda *a: None)  # the controller came back
    await asyncio.wait_for(second.run(asyncio.Event()), 30)
    lines = [
        x.split(b" ", 1)[1].rstrip(b"\n")
        for x in split_lines((rank_dir / "stdout.log").read_bytes())
    ]
    assert lines == [f"line {i}".encode() for i in range(1, 61)]
    assert await second.reconcile() == 0
    second.close()


async def test_reconciliation_counts_and_repairs_lost_bytes(tmp_path):
    rt = ProcessRuntime(tmp_path / "nodes")
    s = spec("r2", "echo a; echo b; echo c")
    await rt.start(s)
    await wait_exit(rt, s)
    rank_dir = tmp_path / "rank-0"
    rank_dir.mkdir()
    f = Follower(rt, s, rank_dir, lambda *a: None)
    await f.run(asyncio.Event())
    text = (rank_dir / "stdout.log").read_bytes()
    lost = split_lines(text)[1]
    (rank_dir / "stdout.log").write_bytes(text.replace(lost, b""))
    f.close()
    f2 = Follower(rt, s, rank_dir, lambda *a: None)
    assert await f2.reconcile() == len(lost)
    assert (rank_dir / "stdout.log").read_bytes() == text
    f2.close()


def test_a_reopened_stream_drops_only_its_repeated_first_lines() -> None:
    from orchestrator.supervisor.follower import _Cursor

    def at(sec: int, text: str) -> bytes:
        return f"2026-11-29T10:00:{sec:02d}.5Z {text}\n".encode()

    cursor = _Cursor()
    first = [at(1, "a"), at(2, "b"), at(2, "c")]
    assert cursor.admit(first) == first
    # Following goes on: a node clock stepped back still loses nothing.
    assert cursor.admit([at(0, "stepped back")]) == [at(0, "stepped back")]
    assert cursor.admit([at(3, "d"), at(3, "e")]) == [at(3, "d"), at(3, "e")]
    # Reopened with --since 10:00:03.5 (inclusive): the repeats come first, then what is new,
    # including a new line stamped the same instant as the last kept ones.
    cursor.reopened = True
    again = [at(3, "d"), at(3, "e"), at(3, "f"), at(4, "g")]
    assert cursor.admit(again) == [at(3, "f"), at(4, "g")]
    assert cursor.admit([at(4, "g")]) == [at(4, "g")]  # not reopened: a genuine repeat line


async def test_a_rank_is_seen_ended_at_once_though_its_output_drains_for_seconds(tmp_path):
    # A grandchild keeps the rank's stdout open for 4 s after the rank itself exited (a weight
    # reader stuck in I/O does that), so the launcher drains its output that long after the
    # exit. The state says "exited" at once, timed when the process ended: two ranks that died
    # a moment apart keep their order. exit.json, the followers' end of output, waits.
    rt = ProcessRuntime(tmp_path / "nodes")
    s = spec("r-late-eof", "(sleep 4; echo late) & exit 3")
    began = time.time()
    await rt.start(s)
    for _ in range(400):
        if (await rt.state(s)).status == "exited":
            break
        await asyncio.sleep(0.05)
    seen = time.time() - began
    state = await rt.state(s)
    assert (state.status, state.exit_code) == ("exited", 3)
    assert seen < 3.0, seen  # not after the drain
    assert not (rt.rank_dir(s) / "exit.json").exists()
    assert state.finished_at is not None
    ended = datetime.fromisoformat(state.finished_at).timestamp()
    assert ended - began < 2.5, ended - began
    for _ in range(300):
        if (rt.rank_dir(s) / "exit.json").exists():
            break
        await asyncio.sleep(0.05)
    assert time.time() - began >= 3.5  # the output drained first: no line lost
    assert (rt.rank_dir(s) / "stdout.log").read_bytes().endswith(b" late\n")
    assert (await rt.state(s)).finished_at == state.finished_at

"""Simulated weights: a model directory of random bytes, and the child process that reads it.

`make_weights(DIR, size, shards)` writes `model-0000i-of-0000n.safetensors` files of random bytes,
a safetensors-like `model.safetensors.index.json` and a `config.json`, then drops the files from
the page cache (`posix_fadvise(DONTNEED)` on those files only, never a global `drop_caches`), so
the first boot reads them from disk as a cold NFS or NVMe read would.

The reader runs in a child process (`python -m orchestrator.simulator.weights`), as SGLang's
scheduler and vLLM's worker processes read the weights, not the container's PID 1. It reads its
rank's share of every shard (bytes [k/N, (k+1)/N) of each file, as a TP rank touches its slice of
every tensor), paced to a byte rate, the way the engines do by default: it maps each shard
(`mmap`, as safetensors' `safe_open` does under both engines' default loaders) and copies its
slice out page by page, so the pages fault in and show as the mapping's resident set in
/proc/PID/smaps while `rchar` does not move. `CLUSTER_SIM_LOADER=read` switches to buffered
`read()` calls (an engine's non-mmap loader), which move `rchar` (and `read_bytes` on a cold
cache). Either way the node's page cache really grows, which is what the orchestrator's per-rank
progress watchers sample (runtime/node_sampler.py measures both ways).

The child speaks one line per event on stdout (`shard I N BYTES`, `paused BYTES`, `done BYTES
SECONDS`, `hogged BYTES`) and takes commands on stdin (`load`, `continue`, `hog BYTES`). It exits
when its parent is gone (stdin closes, or the parent pid changes).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
DEFAULT_ARCH = "PixtralForConditionalGeneration"  # seed 000's GB10 load line (Mistral Small 4)
DEFAULT_QUANT = "compressed-tensors"  # seed 000
ENV_MODEL_DIR = "CLUSTER_SIM_MODEL_DIR"
ENV_LOADER = "CLUSTER_SIM_LOADER"
LOADERS = ("mmap", "read")


def loader_of(env: Mapping[str, str]) -> str:
    """The twin's loader: mmap (the engines' default) unless CLUSTER_SIM_LOADER=read."""
    value = env.get(ENV_LOADER, "mmap") or "mmap"
    if value not in LOADERS:
        raise WeightsError(f"{ENV_LOADER}={value!r}: expected one of {', '.join(LOADERS)}")
    return value


CHUNK = 1 << 20


class WeightsError(Exception):
    pass


@dataclass(frozen=True)
class WeightsInfo:
    directory: Path
    shards: list[Path]
    total_bytes: int
    architecture: str
    quant: str | None

    def share(self, rank: int, world: int) -> list[tuple[Path, int, int]]:
        """(file, offset, length) of rank's slice of every shard."""
        out = []
        for path in self.shards:
            size = path.stat().st_size
            start, end = size * rank // world, size * (rank + 1) // world
            out.append((path, start, end - start))
        return out

    def share_bytes(self, rank: int, world: int) -> int:
        return sum(length for _, _, length in self.share(rank, world))


def shard_name(index: int, count: int) -> str:
    return f"model-{index:05d}-of-{count:05d}.safetensors"


def make_weights(
    directory: Path | str,
    size: int,
    shards: int,
    *,
    architecture: str = DEFAULT_ARCH,
    quant: str | None = DEFAULT_QUANT,
    force: bool = False,
) -> WeightsInfo:
    """Write `size` bytes of random weights in `shards` files under `directory`."""
    root = Path(directory)
    if shards < 1 or size < shards:
        raise WeightsError(f"need at least one byte per shard (size {size}, shards {shards})")
    if root.exists() and any(root.iterdir()) and not force:
        raise WeightsError(f"{root} is not empty (use force to replace its weights)")
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("*.safetensors"):
        old.unlink()
    weight_map: dict[str, str] = {}
    block = os.urandom(CHUNK)
    for i in range(shards):
        name = shard_name(i + 1, shards)
        length = size * (i + 1) // shards - size * i // shards
        with open(root / name, "wb") as f:
            left = length
            while left > 0:
                # Fresh random bytes per chunk (a repeated block would let a deduplicating or
                # compressing filesystem cheat); urandom is ~1 GB/s, cheaper than the disk.
                block = os.urandom(min(CHUNK, left))
                f.write(block)
                left -= len(block)
            f.flush()
            os.fsync(f.fileno())
            with contextlib.suppress(AttributeError, OSError):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        weight_map[f"model.layers.{i}.weight"] = name
    index = {"metadata": {"total_size": size, "format": "cluster-sim"}, "weight_map": weight_map}
    (root / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    config: dict[str, object] = {"architectures": [architecture], "cluster_sim": True}
    if quant:
        config["quantization_config"] = {"quant_method": quant}
    (root / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return load_info(root)


def load_info(directory: Path | str) -> WeightsInfo:
    """The shards and metadata of a model directory; WeightsError when it has no weights."""
    root = Path(directory)
    shards = sorted(p for p in root.glob("*.safetensors") if p.is_file())
    if not shards:
        # vLLM's DefaultModelLoader / SGLang's loader word it this way.
        raise WeightsError(f"Cannot find any model weights with `{root}`")
    arch, quant = DEFAULT_ARCH, None
    with contextlib.suppress(OSError, ValueError, AttributeError, IndexError, TypeError):
        config = json.loads((root / CONFIG_NAME).read_text(encoding="utf-8"))
        arch = str(config["architectures"][0])
        quant = (config.get("quantization_config") or {}).get("quant_method")
    return WeightsInfo(root, shards, sum(p.stat().st_size for p in shards), arch, quant)


def find_weights(model_path: str, env: dict[str, str] | os._Environ[str]) -> WeightsInfo:
    """The weights behind `--model-path`: that directory, or `CLUSTER_SIM_MODEL_DIR` when the
    path does not exist on this machine (the built-in local cluster has no bind mounts)."""
    path = Path(model_path)
    if path.is_dir():
        return load_info(path)
    fallback = env.get(ENV_MODEL_DIR)
    if fallback and Path(fallback).is_dir():
        return load_info(fallback)
    raise WeightsError(
        f"no weights at {model_path}"
        + (f" nor at {ENV_MODEL_DIR}={fallback}" if fallback else "")
        + ": make them with `cluster sim make-weights DIR` and mount or point at DIR"
    )


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            words = rest.split()
            if words and words[0].isdigit():
                out[key] = int(words[0]) * (1024 if len(words) > 1 else 1)
    return out


# ---------------------------------------------------------------------------------------------
# The child


class Pacer:
    """Sleep so that `done` bytes take at least `done / rate` seconds since `start`."""

    def __init__(self, rate: float, clock: float | None = None) -> None:
        self.rate = rate
        self.start = time.monotonic() if clock is None else clock

    def delay(self, done: int, now: float) -> float:
        if self.rate <= 0:
            return 0.0
        return max(0.0, self.start + done / self.rate - now)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _commands() -> Iterator[str]:
    for line in sys.stdin:
        yield line.strip()


def child_main(spec: dict[str, object]) -> int:
    parent = os.getppid()
    info = load_info(str(spec["dir"]))
    rank, world = int(str(spec["rank"])), int(str(spec["world"]))
    rate = float(str(spec.get("rate") or 0))
    pause_at = spec.get("pause_at")
    share = info.share(rank, world)
    total = sum(length for _, _, length in share)
    hogs: list[bytearray] = []
    _say(f"ready {total} {len(share)}")
    commands = _commands()

    def hog(nbytes: int) -> None:
        # Really allocate and touch every page, so RSS (and a container's memory cgroup) grows.
        buf = bytearray(nbytes)
        step = 64 << 20
        pattern = b"\x5a" * min(step, max(nbytes, 1))
        for offset in range(0, nbytes, step):
            n = min(step, nbytes - offset)
            buf[offset : offset + n] = pattern[:n]
        hogs.append(buf)
        _say(f"hogged {nbytes}")

    def obey(until: str) -> bool:
        """Run commands until `until`; False when stdin closed (the parent is gone)."""
        for command in commands:
            if command == until:
                return True
            if command.startswith("hog "):
                hog(int(command.split()[1]))
        return False

    if not obey("load"):
        return 0
    pacer = Pacer(rate)
    done, paused = 0, pause_at is None
    started = time.monotonic()
    use_mmap = spec.get("loader", "mmap") == "mmap"
    # The mappings stay until the whole share is in. The engines unmap each file once its tensors
    # are copied, which at real scale takes minutes a file; scaled down, a file is read in less
    # than the supervisor's 1 s sampling period and would come and go unseen (node_sampler.py
    # counts each file at the largest resident size it saw).
    held = contextlib.ExitStack()
    for i, (path, offset, length) in enumerate(share):
        f = held.enter_context(open(path, "rb"))  # noqa: SIM115 - held until the load is done
        view = held.enter_context(_view(f, use_mmap))
        f.seek(offset)
        left = length
        at = offset
        while left > 0:
            want = min(CHUNK, left)
            if not paused and isinstance(pause_at, int) and done + want >= pause_at:
                want = max(pause_at - done, 0)
            if view is not None:  # a copy out of the mapping faults its pages in
                data = bytes(view[at : at + want]) if want else b""
                at += len(data)
            else:  # buffered, as torch's and the engines' non-mmap readers are
                data = f.read(want) if want else b""
            done += len(data)
            left -= len(data)
            if want and not data:
                raise WeightsError(f"{path} is shorter than its index says")
            if not paused and isinstance(pause_at, int) and done >= pause_at:
                paused = True
                _say(f"paused {done}")
                if not obey("continue"):
                    return 0
                pacer = Pacer(rate)
                pacer.start -= done / rate if rate > 0 else 0
            if os.getppid() != parent:
                return 0
            sleep = pacer.delay(done, time.monotonic())
            if sleep > 0:
                time.sleep(sleep)
        _say(f"shard {i + 1} {len(share)} {done}")
    held.close()
    _say(f"done {done} {time.monotonic() - started:.6f}")
    obey("")  # hold the "weights" until the parent goes; run its hog commands meanwhile
    return 0


@contextlib.contextmanager
def _view(f: BinaryIO, use_mmap: bool) -> Iterator[mmap.mmap | None]:
    """The whole file mapped read-only (None: read() instead, or an empty file)."""
    if not use_mmap or os.fstat(f.fileno()).st_size == 0:
        yield None
        return
    mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield mapping
    finally:
        mapping.close()


# ---------------------------------------------------------------------------------------------
# The parent's handle on the child


@dataclass
class Event:
    kind: str  # ready, shard, paused, done, hogged, exited
    values: list[float]


class ReaderChild:
    """The worker / scheduler child process and its event stream."""

    def __init__(self, spec: dict[str, object]) -> None:
        # The child imports this same package, wherever it lives (a container may run the host's
        # Python from a read-only bind mount with the repository on PYTHONPATH, or not at all).
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.simulator.weights", json.dumps(spec)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # its own traceback, if any, goes where the rank's stderr goes
        )
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        self._buf = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()

    def next_event(self, timeout_s: float) -> Event | None:
        """The next event, None when `timeout_s` passed without one; `exited` at EOF."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left < 0 or not self._selector.select(max(left, 0)):
                return None
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return Event("exited", [float(self.proc.wait())])
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        kind, *values = line.decode().split()
        return Event(kind, [float(v) for v in values])

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


if __name__ == "__main__":
    sys.exit(child_main(json.loads(sys.argv[1])))

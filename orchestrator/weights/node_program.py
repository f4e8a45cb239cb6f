"""The weights' node program: what runs on a node (and on the controller, as the source) to read,
write, verify and inspect a model's files. Standard library only: it is sent as text and run
with `python3 -c PROGRAM MODE ARGS...` (the chain script's `wchain`/`wsource` modes, and the
probes), so a node needs nothing but the Python that Ansible already requires.

Modes:
  send SPEC NODE          write the stream of SPEC's files (read from SPEC.root) to stdout
  recv SPEC TAG NODE      read a stream on stdin, write every file under SPEC.dest
  probe SPEC              one JSON line: what SPEC.dest holds, free space, memory, page cache
  warm SPEC               read the verified files once (into the page cache)

The stream, per file: a JSON line {"t": "file", "path", "size"}, exactly `size` bytes, a JSON
line {"t": "sum", "sha256"}; then {"t": "manifest", "files": [...]} and {"t": "end"}. The sum
follows the bytes so a source that does not know a file's sha256 computes it while sending.

On a node the state lives in DEST/.cluster-weights/: `state.json` (every file verified here:
path -> size, mtime_ns, sha256; and the model's manifest once a push delivered it), `lock`
(one writer at a time), `incoming/TAG/` (files being written, under temporary names, renamed
into place only once their sha256 matched).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import json
import mmap
import os
import select
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

META = ".cluster-weights"
STATE = "state.json"
CHUNK = 1 << 20
VERSION = 1


class Fail(Exception):
    """A failure this program reports as one line and an exit status."""

    def __init__(self, line: str, status: int = 1) -> None:
        super().__init__(line)
        self.line = line
        self.status = status


def safe_relpath(path: str) -> str:
    """A manifest path: relative, normalised, inside the model, never our own metadata."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or parts[0] == META
        or "\0" in path
    ):
        raise Fail(f"refused path {path!r} in the stream (must stay inside the model)", 2)
    return path


def load_state(dest: str) -> dict[str, Any]:
    try:
        with open(os.path.join(dest, META, STATE), encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        return {"version": VERSION, "verified": {}, "manifest": None}
    except (OSError, ValueError) as exc:
        return {"version": VERSION, "verified": {}, "manifest": None, "error": str(exc)}
    if not isinstance(state, dict) or not isinstance(state.get("verified"), dict):
        return {"version": VERSION, "verified": {}, "manifest": None, "error": "bad state file"}
    return state


def save_state(dest: str, state: dict[str, Any]) -> None:
    meta = os.path.join(dest, META)
    tmp = os.path.join(meta, STATE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(meta, STATE))


def stamp(path: str, sha256: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}


def still_there(dest: str, rel: str, rec: dict[str, Any]) -> str:
    """held | missing | changed: is a verified file still what it was when verified?"""
    try:
        st = os.stat(os.path.join(dest, rel))
    except OSError:
        return "missing"
    if st.st_size != rec.get("size") or st.st_mtime_ns != rec.get("mtime_ns"):
        return "changed"
    return "held"


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * CHUNK):
            h.update(chunk)
    return h.hexdigest()


class Hasher:
    """sha256 in a second thread: chunk i is hashed while chunk i+1 is read and chunk i written
    (hashlib and file writes release the GIL), so a node verifies at the pace of the slower of
    its disk and one core's sha256, not of both in turn."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.h = hashlib.sha256()
        self.pool = pool
        self.pending: Future[None] | None = None

    def feed(self, chunk: bytes) -> None:
        if self.pending is not None:
            self.pending.result()
        self.pending = self.pool.submit(self.h.update, chunk)

    def hexdigest(self) -> str:
        if self.pending is not None:
            self.pending.result()
            self.pending = None
        return self.h.hexdigest()


# -- send ------------------------------------------------------------------------------------


def _line(out: BinaryIO, obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")


def send(spec: dict[str, Any], out: BinaryIO) -> int:
    """Stream the files spec["send"] names (paths of spec["manifest"]) from spec["root"]; hash
    those whose sha256 the manifest does not know yet. The manifest, completed with the sums
    computed on the way, closes the stream (and goes to spec["manifest_out"] when given)."""
    root = spec["root"]
    manifest = spec["manifest"]
    entries = {e["path"]: e for e in manifest["files"]}
    try:
        for rel in spec["send"]:
            _send_file(root, entries[safe_relpath(rel)], out)
        if all(e.get("sha256") for e in manifest["files"]):  # a manifest only once it is whole
            _line(out, {"t": "manifest", "manifest": manifest})
        _line(out, {"t": "end"})
        out.flush()
    finally:  # the sums computed so far, even when the stream broke: a re-send needs them
        if spec.get("manifest_out"):
            with open(spec["manifest_out"], "w", encoding="utf-8") as mf:
                json.dump(manifest, mf, sort_keys=True)
    return 0


def _send_file(root: str, entry: dict[str, Any], out: BinaryIO) -> None:
    rel = entry["path"]
    path = os.path.join(root, rel)
    h = None if entry.get("sha256") else hashlib.sha256()
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below, after the trailer)
    except OSError as exc:
        raise Fail(f"cannot read {path}: {exc.strerror}", 3) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size != entry["size"]:
            raise Fail(f"{path} is {size} bytes, the manifest says {entry['size']}", 3)
        _line(out, {"t": "file", "path": rel, "size": size})
        left = size
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                raise Fail(f"{path} shrank while it was sent", 3)
            if h is not None:
                h.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    if h is not None:
        entry["sha256"] = h.hexdigest()
    _line(out, {"t": "sum", "sha256": entry["sha256"]})


# -- recv ------------------------------------------------------------------------------------


class Reader:
    """The incoming stream, read straight from its file descriptor with a deadline: a receiver
    cut off from its sender (a dead link leaves sshd's session open for hours) gives up after
    `idle_s` without a byte and lets go of the destination's lock."""

    def __init__(self, inp: BinaryIO, idle_s: float | None) -> None:
        self.inp = inp
        self.idle_s = idle_s
        self.buf = bytearray()
        try:
            self.fd: int | None = inp.fileno()
        except (OSError, ValueError, AttributeError):
            self.fd = None  # an in-memory stream (tests): no deadline needed

    def _fill(self) -> bool:
        if self.fd is None:
            chunk = self.inp.read(CHUNK)
        else:
            if self.idle_s is not None:
                ready, _, _ = select.select([self.fd], [], [], self.idle_s)
                if not ready:
                    raise Fail(f"no byte arrived for {self.idle_s:g} s: the stream stopped", 4)
            chunk = os.read(self.fd, CHUNK)
        self.buf += chunk
        return bool(chunk)

    def read(self, n: int) -> bytes:
        """Up to n bytes (fewer only at the end of the stream)."""
        if not self.buf:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def readline(self) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > 1 << 24 or not self._fill():
                break
        end = self.buf.find(b"\n")
        end = len(self.buf) if end < 0 else end + 1
        out = bytes(self.buf[:end])
        del self.buf[:end]
        return out


def _json_line(inp: Reader) -> dict[str, Any] | None:
    raw = inp.readline()
    if not raw:
        return None
    if not raw.endswith(b"\n"):
        raise Fail("the stream ended inside a header line", 4)
    try:
        obj = json.loads(raw)
    except ValueError:
        raise Fail(f"the stream is not a weights stream (bad header {raw[:60]!r})", 4) from None
    if not isinstance(obj, dict):
        raise Fail("the stream is not a weights stream", 4)
    return obj


def _lock(path: str, dest: str, node: str, wait_s: float) -> Any:
    """The destination's lock; waits up to `wait_s` for a cut-off receiver to give up."""
    lock = open(path, "a")  # noqa: SIM115 (held until exit)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            if time.monotonic() >= deadline:
                lock.close()
                raise Fail(f"another push is writing {dest} on {node}", 3) from None
            time.sleep(0.2)


def _sweep_incoming(meta: str) -> None:
    """Temporary files of earlier pushes that died (we hold the lock: nobody writes them)."""
    inc = os.path.join(meta, "incoming")
    if os.path.isdir(inc):
        for name in os.listdir(inc):
            shutil.rmtree(os.path.join(inc, name), ignore_errors=True)


def recv(spec: dict[str, Any], tag: str, node: str, raw: BinaryIO) -> int:
    """Write the stream's files under spec["dest"], each under a temporary name first, renamed
    into place once complete and its sha256 matched; record each verified file at once (so a
    stream that breaks keeps what arrived whole)."""
    dest = spec["dest"]
    meta = os.path.join(dest, META)
    idle = spec.get("idle_s")
    inp = Reader(raw, float(idle) if idle else None)
    try:
        os.makedirs(meta, exist_ok=True)
        held = _lock(os.path.join(meta, "lock"), dest, node, float(idle) + 5 if idle else 0.0)
    except OSError as exc:
        raise Fail(f"cannot create {meta}: {exc.strerror}", 3) from None
    _sweep_incoming(meta)
    inc = os.path.join(meta, "incoming", tag)
    os.makedirs(inc)
    state = load_state(dest)
    verified: dict[str, Any] = state["verified"]
    files = good = bad = 0
    nbytes = 0
    ended = False
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        while (head := _json_line(inp)) is not None:
            t = head.get("t")
            if t == "end":
                ended = True
                break
            if t == "manifest":
                state["manifest"] = head["manifest"]
                continue
            if t != "file":
                raise Fail(f"unexpected {t!r} in the stream", 4)
            rel = safe_relpath(str(head["path"]))
            size = int(head["size"])
            files += 1
            tmp = os.path.join(inc, str(files))
            h = Hasher(pool)
            left = size
            try:
                with open(tmp, "wb") as f:
                    while left > 0:
                        chunk = inp.read(min(CHUNK, left))
                        if not chunk:
                            raise Fail(
                                f"the stream ended inside {rel} after {size - left} of "
                                f"{size} bytes",
                                4,
                            )
                        h.feed(chunk)
                        f.write(chunk)
                        left -= len(chunk)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                what = "no space left" if exc.errno == errno.ENOSPC else exc.strerror
                raise Fail(f"cannot write {rel} under {dest}: {what}", 3) from None
            nbytes += size
            trailer = _json_line(inp)
            if trailer is None or trailer.get("t") != "sum":
                raise Fail(f"the stream ended after {rel} without its sha256", 4)
            want, got = str(trailer.get("sha256", "")), h.hexdigest()
            if got != want:
                bad += 1
                os.unlink(tmp)
                verified.pop(rel, None)
                print(f"sha256 mismatch for {rel}: got {got[:16]}, expected {want[:16]}")
                continue
            final = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(tmp, final)
            verified[rel] = stamp(final, got)
            good += 1
            save_state(dest, state)
        if not ended:
            raise Fail(f"the stream stopped after {files} files, before its end", 4)
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(inc, ignore_errors=True)
        state["updated"] = time.time()
        try:
            save_state(dest, state)
        except OSError as exc:
            print(f"cannot record what was verified in {meta}: {exc.strerror}")
        held.close()  # the lock goes with it
    summary = summarize(dest, state)
    print(
        f"received {files} files ({nbytes} bytes), {good} verified, {bad} bad; "
        f"{'complete' if summary['complete'] else 'incomplete'}"
    )
    return 1 if bad else 0


# -- probe, warm -----------------------------------------------------------------------------


def summarize(dest: str, state: dict[str, Any], want_sums: bool = False) -> dict[str, Any]:
    """What DEST holds against its recorded manifest: per file held | missing | changed."""
    verified = state.get("verified", {})
    manifest = state.get("manifest")
    files: dict[str, str] = {}
    held: dict[str, str] = {}
    for rel, rec in verified.items():
        s = still_there(dest, rel, rec)
        if s == "held":
            held[rel] = rec["sha256"]
    if manifest is not None:
        for entry in manifest["files"]:
            rel = entry["path"]
            if held.get(rel) == entry.get("sha256"):
                files[rel] = "held"
            elif rel in verified and still_there(dest, rel, verified[rel]) == "changed":
                files[rel] = "changed"
            elif os.path.exists(os.path.join(dest, rel)):
                files[rel] = "unverified"
            else:
                files[rel] = "missing"
    complete = manifest is not None and all(v == "held" for v in files.values())
    out: dict[str, Any] = {"complete": complete, "files": files}
    if want_sums:
        out["held"] = held
    return out


def _free(path: str) -> tuple[str, int | None]:
    """The nearest existing ancestor of `path` and its free bytes for an unprivileged writer."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    try:
        st = os.statvfs(p)
    except OSError:
        return p, None
    return p, st.f_bavail * st.f_frsize


def meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


_libc: Any = None


def cached_bytes(path: str) -> int | None:
    """Bytes of `path` in the page cache, by mincore(2) on a read-only mapping (what fincore
    does); reading nothing and evicting nothing."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            page = mmap.PAGESIZE
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return None
            resident = sum(b & 1 for b in bytes(vec))
        finally:
            _libc.munmap(ctypes.c_void_p(addr), size)
        return min(size, resident * page)
    finally:
        os.close(fd)


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    dest = spec["dest"]
    where, free = _free(dest)
    out: dict[str, Any] = {
        "dest": dest,
        "exists": os.path.isdir(dest),
        "free_path": where,
        "free_bytes": free,
        "mem": {k: v for k, v in meminfo().items() if k in ("MemTotal", "MemAvailable", "MemFree")},
    }
    state = load_state(dest)
    if "error" in state:
        out["state_error"] = state["error"]
    if spec.get("verify"):
        _reverify(dest, state)
    out["manifest"] = state.get("manifest")
    out.update(summarize(dest, state, want_sums=True))
    extra = []
    if out["exists"] and state.get("manifest") is not None:
        known = {e["path"] for e in state["manifest"]["files"]}
        for base, dirs, names in os.walk(dest):
            dirs[:] = [d for d in dirs if not (base == dest and d == META)]
            for n in names:
                rel = os.path.relpath(os.path.join(base, n), dest)
                if rel not in known:
                    extra.append(rel)
    out["extra"] = sorted(extra)[:50]
    if spec.get("cache") and state.get("manifest") is not None:
        cached = 0
        for entry in state["manifest"]["files"]:
            c = cached_bytes(os.path.join(dest, entry["path"]))
            cached += c or 0
        out["cached_bytes"] = cached
    return out


def _reverify(dest: str, state: dict[str, Any]) -> None:
    """Hash every file the manifest names, in parallel; record what matches, forget the rest."""
    manifest = state.get("manifest")
    if manifest is None:
        return
    verified = state["verified"]

    def one(entry: dict[str, Any]) -> tuple[str, str | None]:
        path = os.path.join(dest, entry["path"])
        try:
            return entry["path"], sha256_file(path)
        except OSError:
            return entry["path"], None

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        sums = dict(pool.map(one, manifest["files"]))
    for entry in manifest["files"]:
        rel, got = entry["path"], sums.get(entry["path"])
        if got is not None and got == entry.get("sha256"):
            verified[rel] = stamp(os.path.join(dest, rel), got)
        else:
            verified.pop(rel, None)
    if os.path.isdir(os.path.join(dest, META)):
        with contextlib.suppress(OSError):
            save_state(dest, state)


def warm(spec: dict[str, Any]) -> int:
    """Read every held file once so the page cache holds it; print bytes read."""
    dest = spec["dest"]
    state = load_state(dest)
    total = 0
    for rel in summarize(dest, state, want_sums=True)["held"]:
        path = os.path.join(dest, rel)
        with open(path, "rb") as f:
            while chunk := f.read(4 * CHUNK):
                total += len(chunk)
    print(json.dumps({"warmed_bytes": total}))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: MODE SPEC ...", file=sys.stderr)
        return 2
    mode, spec = argv[0], json.loads(argv[1])
    try:
        if mode == "send":
            return send(spec, sys.stdout.buffer)
        if mode == "recv":
            return recv(spec, argv[2], argv[3], sys.stdin.buffer)
        if mode == "probe":
            print(json.dumps(probe(spec), sort_keys=True))
            return 0
        if mode == "warm":
            return warm(spec)
    except Fail as exc:
        print(exc.line, file=sys.stderr if mode == "send" else sys.stdout)
        return exc.status
    except BrokenPipeError:
        print("the next hop stopped reading", file=sys.stderr)
        return 5
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

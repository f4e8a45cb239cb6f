"""Drop the layers every receiver already holds from a `docker save` stream, on the fly.

Runs as its own process, stdlib only (the controller starts it with its own interpreter; a node
could run it with `python3`), wrapping the command that produces the archive:

    python3 layer_filter.py --report FILE --drop sha256:<diff id> ... -- docker save IMAGE

It reads the producer's tar stream, writes a tar stream to stdout that lacks the dropped layers,
and keeps everything else (configs, manifest.json, repositories, VERSION, json, symlinks). A
layer is recognised by its content, never by a name the daemon made up:

* the OCI layout of Docker 25+ (`blobs/sha256/<hex>`): the name *is* the digest of the
  uncompressed layer, i.e. its diff id, so a dropped blob is skipped without reading it twice;
* the legacy layout (Docker <= 24, `<v1 id>/layer.tar`): the v1 id says nothing about the
  content, so the member is hashed while it is spooled (memory up to 64 MiB, then a temporary
  file) and sent only if its sha256 is not in the drop set.

Why this is safe on a graph-driver store (checked on Docker 20.10.24, overlay2, see
docs/images.md): `docker load` skips a layer whose chain it already holds without opening its
file, and a missing file for a layer it lacks fails the load with `open .../layer.tar: no such
file or directory` (exit 1), which the push treats as "send this node the whole image".

The producer's stderr is passed through unchanged (the push reads it as the source's error); its
exit status becomes ours. What was kept and dropped goes to `--report` as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from typing import IO, Any

COPY = 1 << 20
SPOOL = 64 << 20
OCI_BLOB = re.compile(r"^(?:\./)?blobs/sha256/([0-9a-f]{64})$")
LEGACY_LAYER = re.compile(r"^(?:\./)?[0-9a-f]{64}/layer\.tar$")


def filter_tar(src: IO[bytes], dst: IO[bytes], drop: set[str]) -> dict[str, Any]:
    """Copy the tar stream `src` to `dst` without the layers whose diff id is in `drop`."""
    kept: list[tuple[str, int]] = []
    dropped: list[tuple[str, int]] = []
    # "r|*": a stream, plain or compressed (an archive given as .tar.gz); the output is plain.
    with (
        tarfile.open(fileobj=src, mode="r|*", bufsize=COPY) as tin,
        tarfile.open(fileobj=dst, mode="w|", format=tarfile.PAX_FORMAT, bufsize=COPY) as tout,
    ):
        _copy(tin, tout, drop, kept, dropped)
    return {"kept": kept, "dropped": dropped}


def _copy(
    tin: tarfile.TarFile,
    tout: tarfile.TarFile,
    drop: set[str],
    kept: list[tuple[str, int]],
    dropped: list[tuple[str, int]],
) -> None:
    for m in tin:
        if not m.isfile():
            tout.addfile(m)
            continue
        blob = OCI_BLOB.match(m.name)
        if blob is not None:
            digest = "sha256:" + blob.group(1)
            if digest in drop:
                dropped.append((digest, m.size))
                continue  # the stream reader skips the member's bytes itself
            tout.addfile(m, tin.extractfile(m))
            kept.append((digest, m.size))
            continue
        if LEGACY_LAYER.match(m.name):
            f = tin.extractfile(m)
            assert f is not None
            h = hashlib.sha256()
            with tempfile.SpooledTemporaryFile(max_size=SPOOL) as spool:
                while chunk := f.read(COPY):
                    h.update(chunk)
                    spool.write(chunk)
                digest = "sha256:" + h.hexdigest()
                if digest in drop:
                    dropped.append((digest, m.size))
                    continue
                spool.seek(0)
                tout.addfile(m, spool)
            kept.append((digest, m.size))
            continue
        tout.addfile(m, tin.extractfile(m))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="layer_filter")
    ap.add_argument("--drop", nargs="*", default=[], help="diff ids (sha256:...) to leave out")
    ap.add_argument("--report", default=None, help="write what was kept/dropped here (JSON)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the producer's argv")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        print("layer_filter: no producer command after --", file=sys.stderr)
        return 2
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    status = 0
    try:
        result = filter_tar(proc.stdout, sys.stdout.buffer, set(args.drop))
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        proc.kill()
        status = 141
        result = None
    except (tarfile.TarError, OSError) as exc:
        proc.kill()
        rc = proc.wait()
        # The producer's own failure (a docker save error) explains a truncated stream best.
        if rc:
            return rc
        print(f"layer_filter: the archive stream is not a readable tar: {exc}", file=sys.stderr)
        return 1
    rc = proc.wait()
    if args.report and result is not None:
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
    return rc or status


if __name__ == "__main__":
    sys.exit(main())

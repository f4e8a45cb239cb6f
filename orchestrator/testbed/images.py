"""The offline test image (busybox-static): built once, `docker save`d, loaded on every node."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

from .constants import DAEMON_ENV, REAL_DOCKER, TEST_IMAGE
from .dockerd import DockerdMixin
from .errors import TestbedError
from .node import Node
from .prerequisites import _which
from .processes import _run


class ImagesMixin(DockerdMixin):
    """Build and load the test image on nodes."""

    # ---- test image ------------------------------------------------------------------------

    def image_archive(self, tag: str = TEST_IMAGE) -> Path:
        """The `docker save` archive of a test image (exists once it was built on one node)."""
        return self.image_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", tag) + ".tar")

    def build_test_image(self, node: int | str | Node, tag: str = TEST_IMAGE) -> str:
        """Make `tag` (a busybox-static rootfs, ~1 MB) present in a node's dockerd, offline.

        Built once per testbed (docker import, then docker save to <root>/image/); every later
        node gets the same archive through `docker load`, so the image ID is the same on all."""
        nd = self.node(node)
        archive = self.image_archive(tag)
        if archive.exists():
            self.docker(nd, "load", "-q", "-i", str(archive), timeout=180)
            return tag
        rootfs = self.image_dir / "rootfs"
        if rootfs.exists():
            shutil.rmtree(rootfs)
        for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "root", "proc", "sys", "dev"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        os.chmod(rootfs / "tmp", 0o1777)  # noqa: S103 - /tmp in an image root is sticky 1777
        busybox = _which("busybox") or "/bin/busybox"
        shutil.copy2(busybox, rootfs / "bin" / "busybox")
        applets = _run([busybox, "--list-full"]).stdout.split()
        for rel in applets:
            dst = rootfs / rel
            if rel == "bin/busybox" or dst.exists() or dst.is_symlink():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to("/bin/busybox")
        (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (rootfs / "etc" / "group").write_text("root:x:0:\n")
        env = {**DAEMON_ENV, "DOCKER_CONFIG": str(self.docker_config_dir)}
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            imp = subprocess.run(
                [REAL_DOCKER, "-H", nd.docker_host, "import", "-c", 'CMD ["/bin/sh"]', "-", tag],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                timeout=180,
                env=env,
                check=False,
            )
        finally:
            if tar.stdout:
                tar.stdout.close()
            tar.wait(timeout=60)
        if imp.returncode != 0 or tar.returncode != 0:
            raise TestbedError(f"docker import failed: {imp.stderr.strip()}")
        self.image_dir.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_suffix(".tmp")
        self.docker(nd, "save", "-o", str(tmp), tag, timeout=180)
        os.replace(tmp, archive)
        shutil.rmtree(rootfs)
        return tag

    def load_test_image(
        self, nodes: Iterable[int | str | Node] | None = None, tag: str = TEST_IMAGE
    ) -> str:
        """`build_test_image` on several nodes (all by default): built once, loaded elsewhere."""
        targets = [self.node(x) for x in nodes] if nodes is not None else self.nodes
        if not targets:
            return tag
        self.build_test_image(targets[0], tag)
        errors: list[BaseException] = []

        def load(nd: Node) -> None:
            try:
                self.build_test_image(nd, tag)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=load, args=(nd,)) for nd in targets[1:]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        if errors:
            raise errors[0]
        return tag

"""The known_hosts lines the chain hands to every node, so each can vouch for the next (pure)."""

from __future__ import annotations

import hashlib
import hmac
import re
from base64 import b64decode
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.models.inventory import Inventory

MAX_KNOWN_HOSTS = 32 << 10  # the chain's command line must stay well under 128 KiB per argument


def filter_known_hosts(text: str, hosts: Iterable[tuple[str, int]]) -> str:
    """The known_hosts lines that can vouch for `hosts` (address, port): plain, wildcard and
    hashed (`|1|salt|hmac`) patterns, and @cert-authority / @revoked markers."""
    names = [h if p == 22 else f"[{h}]:{p}" for h, p in hosts]
    kept: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        words = s.split()
        patterns = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        if any(_host_matches(pat, name) for pat in patterns.split(",") for name in names):
            kept.append(s)
    return "\n".join(kept)


def _host_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        try:
            _, _, salt, digest = pattern.split("|", 3)
            mac = hmac.new(b64decode(salt), name.encode(), hashlib.sha1).digest()
            return hmac.compare_digest(mac, b64decode(digest))
        except (ValueError, TypeError):
            return False
    if pattern.startswith("!"):
        return False
    # OpenSSH patterns know only * and ?; brackets are literal (`[host]:port`).
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, name) is not None


def chain_known_hosts(inventory: Inventory) -> str:
    """The inventory's known_hosts lines for its nodes, for the chain to pass along ('' when
    there are none or too many: the nodes' own ~/.ssh/known_hosts then vouch alone)."""
    if inventory.known_hosts is None or not inventory.known_hosts.is_file():
        return ""
    text = inventory.known_hosts.read_text(encoding="utf-8", errors="replace")
    known = filter_known_hosts(text, [(n.address, n.port) for n in inventory.nodes])
    return "" if len(known) > MAX_KNOWN_HOSTS else known

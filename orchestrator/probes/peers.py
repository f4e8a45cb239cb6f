"""Can this node SSH to its peers? `ssh -o BatchMode=yes -o ConnectTimeout=5 PEER true`, from it.

The image chain (`cluster image push`) streams an image from node to node over SSH: node A must
reach node B with A's own user, key and known_hosts, without a prompt. BatchMode makes a missing
key or an unknown host key fail at once (`Permission denied (publickey)`, `Host key verification
failed.`) instead of waiting for a password nobody types. Every peer is tried at once, in the
background of one constant script; each answers one line:

    peer nvidia@192.0.2.11 0
    peer nvidia@192.0.2.12 255 Host key verification failed.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.probes.base import Probe, excerpt, fail

NAME = "peers"
CONNECT_TIMEOUT_S = 5

SCRIPT = f"""for h do
  (
    out=$(ssh -n -o BatchMode=yes -o ConnectTimeout={CONNECT_TIMEOUT_S} \\
      -o ServerAliveInterval=2 -o ServerAliveCountMax=2 -- "$h" true 2>&1)
    rc=$?
    printf 'peer %s %s %s\\n' "$h" "$rc" "$(printf '%s' "$out" | tail -n 1)"
  ) &
done
wait
"""


class PeerResult(StrictModel):
    """One `ssh PEER true` from this node."""

    target: str = Field(description="what was given to ssh: user@address")
    exit_status: int
    message: str = Field(default="", description="ssh's last line of output")

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def parse_peers(stdout: str) -> tuple[PeerResult, ...]:
    """The output of `SCRIPT` -> one result per peer, in the order they answered."""
    results = []
    for number, raw in enumerate(stdout.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        words = line.split(" ", 3)
        if len(words) < 3 or words[0] != "peer" or not words[2].lstrip("-").isdigit():
            what = f"line {number} is not `peer TARGET STATUS [MESSAGE]`: {excerpt(line)!r}"
            raise fail(NAME, what)
        message = words[3].strip() if len(words) == 4 else ""
        results.append(PeerResult(target=words[1], exit_status=int(words[2]), message=message))
    return tuple(results)


def peers_probe(targets: tuple[str, ...]) -> Probe[tuple[PeerResult, ...]]:
    return Probe(name=NAME, argv=("sh", "-c", SCRIPT, "peers-probe", *targets), parse=parse_peers)

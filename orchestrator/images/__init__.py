"""Put one image on every node, fast, and prove each node can run it.

Pure core, thin edge:

* **plan** (`plan_push`, pure): who holds the image already (compared on what survives `docker
  save | docker load`, per node store: `probes/image.py`), who needs it, whether its platform
  fits the nodes (refused before any byte moves), the chain order, and whether zstd on the wire
  pays. `judge_round` (pure) reads what the chain said and names, per node, loaded / failed
  (with the evidence) / starved (an upstream hop broke); `next_round` (pure) picks what to
  re-send and from which node.
* **execute** (`push_image`, thin): a **pipelined chain**. The source (the controller's
  `docker save`, a tarball, or a node that holds the image) streams once into the first node;
  each node feeds its own `docker load` and forwards the same bytes to the next node while they
  arrive (`images_chain.sh`, over SSH node to node), so the last node's load starts a fraction
  of a second after the first's and the whole push costs about one copy over one link. When
  nodes cannot open SSH sessions on each other, it falls back to a bounded **fan-out** from the
  controller and says so. After every round each node is re-probed (`docker image inspect`):
  only a node holding the expected identity counts. Nodes starved by a broken hop are re-sent
  from a node that succeeded, and only those.
* **exec-readiness** (`probe_exec_ready`): the throwaway-container probe of
  `probes/exec_ready.py` on every node that loaded, retried through the lazy-unpack window.

`cluster boot` calls `push_image(inventory, recipe.image.reference, options=PushOptions(
expected_digest=recipe.image.digest, platform=recipe.image.platform, ready_window_s=recipe.
timeouts.exec_ready, connect=<the boot's ConnectOptions>))` and then
`report.raise_for_failures()`; `probe_exec_ready` alone when nothing needs pushing.

The package, by what each module owns:

    model.py        the source, node states, the plan, hop outcomes, reports, options, events
    plan.py         pure: plan_push, decide_compression, compression_pays, choose_mode
    rounds.py       pure: the chain's words (parse_chain_line), judge_round, next_round
    known_hosts.py  pure: the known_hosts lines that vouch for the nodes
    archive.py      pure over a file: read_archive (a `docker save` tarball's identity)
    nodes.py        asking nodes: run_bounded, gather_states
    context.py      one push's shared context and the chain script's argv (chain_script)
    pump.py         moving the bytes: pipes, zstd, splice, the fan-out's copy
    source.py       resolve_source (what the source holds) and its raw stream
    chain.py        one round on the nodes: hop check, chain or fan-out waves, cleanup
    push.py         push_image: rounds, verify, re-send, exec-readiness, the report
    readiness.py    probe_exec_ready and probe_image (`cluster image probe`)
"""

from orchestrator.images.archive import read_archive
from orchestrator.images.context import chain_script
from orchestrator.images.known_hosts import MAX_KNOWN_HOSTS, filter_known_hosts
from orchestrator.images.layers import LayerPlan, NodeLayers, plan_layers
from orchestrator.images.model import (
    Compression,
    EventSink,
    HopOutcome,
    HopStatus,
    NodeAction,
    NodeResult,
    NodeState,
    Problem,
    PushEvent,
    PushOptions,
    PushPlan,
    PushReport,
    RoundReport,
    Source,
    SourceImage,
    SourceKind,
    TransportFactory,
)
from orchestrator.images.nodes import gather_states, run_bounded
from orchestrator.images.plan import (
    MIN_RATIO,
    choose_mode,
    compression_pays,
    decide_compression,
    plan_push,
)
from orchestrator.images.pump import CHUNK, PIPE_BYTES
from orchestrator.images.push import SAMPLE_BYTES, push_image
from orchestrator.images.readiness import ProbeReport, ProbeRow, probe_exec_ready, probe_image
from orchestrator.images.rounds import (
    PROTOCOL,
    UNPACK_ERROR,
    ChainEvent,
    RoundLog,
    judge_round,
    next_round,
    parse_chain_line,
)
from orchestrator.images.source import resolve_source
from orchestrator.images.status import ImageStatusReport, NodeImageStatus, image_status, status_rows
from orchestrator.models.push import Mode

__all__ = [
    "CHUNK",
    "MAX_KNOWN_HOSTS",
    "MIN_RATIO",
    "PIPE_BYTES",
    "PROTOCOL",
    "SAMPLE_BYTES",
    "UNPACK_ERROR",
    "ChainEvent",
    "Compression",
    "EventSink",
    "HopOutcome",
    "HopStatus",
    "ImageStatusReport",
    "LayerPlan",
    "Mode",
    "NodeAction",
    "NodeImageStatus",
    "NodeLayers",
    "NodeResult",
    "NodeState",
    "ProbeReport",
    "ProbeRow",
    "Problem",
    "PushEvent",
    "PushOptions",
    "PushPlan",
    "PushReport",
    "RoundLog",
    "RoundReport",
    "Source",
    "SourceImage",
    "SourceKind",
    "TransportFactory",
    "chain_script",
    "choose_mode",
    "compression_pays",
    "decide_compression",
    "filter_known_hosts",
    "gather_states",
    "image_status",
    "judge_round",
    "next_round",
    "parse_chain_line",
    "plan_layers",
    "plan_push",
    "probe_exec_ready",
    "probe_image",
    "push_image",
    "read_archive",
    "resolve_source",
    "run_bounded",
    "status_rows",
]

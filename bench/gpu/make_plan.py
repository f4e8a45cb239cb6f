"""Issue 11, step 1 (on the controller): generate `cluster nccl-check`'s plan for a 2-node
inventory whose two "nodes" are one GPU host reached through the local transport.

    .venv/bin/python bench/gpu/make_plan.py bench/gpu/plan.json

The inventory is `bench/gpu/inventory-2x.yaml` (127.0.0.10 and .11 on `lo`, the host's only
interface that both processes share). The recipe is the 8x SGLang lane cut to 2 nodes and TP 2,
so render(), the rendezvous plan and plan_nccl_check() run exactly as for a real boot. The plan's
per-rank env and argv are written to JSON; `run_plan.py` applies them by hand on the GPU host.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.facts import FactsRequest, gather_facts  # noqa: E402
from orchestrator.inventory import load_inventory  # noqa: E402
from orchestrator.nccl_check import NcclCheckOptions, plan_nccl_check  # noqa: E402
from orchestrator.plan.rendezvous import plan_rendezvous  # noqa: E402
from orchestrator.recipes import resolve_recipe  # noqa: E402
from orchestrator.transport import ConnectOptions  # noqa: E402
from orchestrator.transport.pool import close_transports, open_transports  # noqa: E402

SIZES = (1 << 20, 16 << 20, 128 << 20, 512 << 20)


async def main(out: Path) -> None:
    inventory = load_inventory(Path(__file__).with_name("inventory-2x.yaml"))
    recipe = resolve_recipe("mistral-large4-8x-sglang").model_copy(update={"nodes": 2, "tp": 2})
    transports = open_transports(inventory, ConnectOptions())
    try:
        facts = await gather_facts(inventory, transports, FactsRequest(docker=False, clock=False))
    finally:
        await close_transports(transports)
    rendezvous = plan_rendezvous(recipe, inventory, facts)
    script = (REPO / "orchestrator" / "scripts" / "nccl_allreduce.py").read_text()
    options = NcclCheckOptions(backend="nccl", sizes=SIZES, iters=20, timeout_s=120)
    launches = plan_nccl_check(recipe, inventory, rendezvous, "gpu-check", options, script)
    out.write_text(
        json.dumps(
            {
                "head": f"{rendezvous.head_addr}:{rendezvous.head_port}",
                "ranks": [
                    {"rank": r.rank, "node": r.node, "env": r.env, "argv": list(r.engine_argv)}
                    for r in launches
                ],
            },
            indent=2,
        )
    )
    for r in launches:
        per_host = {
            k: v for k, v in r.env.items() if "IFNAME" in k or k.startswith(("NCCL", "UCX", "OMPI"))
        }
        print(f"rank {r.rank} ({r.node}): {per_host}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/gpu/plan.json")))

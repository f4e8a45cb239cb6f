"""Issue 11, step 2 (on the GPU host): apply the plan by hand, one process per GPU.

    python3 bench/gpu/run_plan.py bench/gpu/plan.json OUT_DIR

Runs the two ranks twice with exactly the plan's env and argv (plus CUDA_VISIBLE_DEVICES=rank and
the three NVLink-multicast switches that host requires): first as generated, where NCCL picks
P2P/SHM on one host, then with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, which forces NCCL's network
path through the generated NCCL_SOCKET_IFNAME. Writes OUT_DIR/report.json and both runs' logs.
Stdlib only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HOST_REQUIRED = {  # the lent machine's rule: NVLink multicast stays off
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
TRANSPORT = re.compile(
    r"via (P2P/\S+|SHM/\S+|NET/\S+)|NET/(Socket|IB)|Using network (\S+)|NCCL_SOCKET_IFNAME set to (\S+)|NET/Socket : Using \[\d+\](\S+)"
)


def run(plan: dict, extra: dict[str, str], out: Path, name: str) -> dict:
    procs = []
    started = time.monotonic()
    for r in plan["ranks"]:
        env = {
            **os.environ,
            **r["env"],
            **HOST_REQUIRED,
            **extra,
            "CUDA_VISIBLE_DEVICES": str(r["rank"]),
        }
        log = (out / f"{name}-rank{r['rank']}.log").open("wb")
        procs.append(
            (
                r["rank"],
                subprocess.Popen(r["argv"], env=env, stdout=log, stderr=subprocess.STDOUT),
                log,
            )
        )
    codes = {}
    for rank, p, log in procs:
        codes[rank] = p.wait(timeout=400)
        log.close()
    result: dict = {
        "extra_env": extra,
        "seconds": round(time.monotonic() - started, 2),
        "ranks": {},
    }
    for rank, _, _ in procs:
        text = (out / f"{name}-rank{rank}.log").read_text(errors="replace")
        events = [
            json.loads(line.split(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("NCCLCHECK ")
        ]
        transports = sorted({m.group(0) for m in TRANSPORT.finditer(text)})
        result["ranks"][rank] = {
            "exit": codes[rank],
            "joined": any(e["event"] == "joined" for e in events),
            "allreduce": next((e for e in events if e["event"] == "allreduce"), None),
            "bandwidth": [
                {
                    "bytes": e["bytes"],
                    "busbw_GBps": round(e["busbw_gbps"], 2),
                    "algbw_GBps": round(e["algbw_gbps"], 2),
                }
                for e in events
                if e["event"] == "bw"
            ],
            "nccl_transport_lines": transports[:20],
            "error": next((e for e in events if e["event"] == "error"), None),
        }
    return result


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
    import torch

    report = {
        "gpus": smi.strip().splitlines(),
        "topology": topo.strip().splitlines()[:6],
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "head": plan["head"],
        "generated_env_rank0": plan["ranks"][0]["env"],
        "runs": {
            "as_generated": run(plan, {}, out, "p2p"),
            "network_forced": run(
                plan, {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, out, "net"
            ),
        },
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

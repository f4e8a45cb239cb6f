"""One factor for simulated time: every engine duration and every byte count is multiplied by it.

A real 8x GB10 boot of Mistral Large 4 reads 76.25 GB per rank in about 80 minutes (seed 002) and
waits up to 7200 s at the post-load barrier. The simulator keeps the shape of that boot and shrinks
it by one factor `f`:

- durations (the barrier window, the watchdog, dist and collective timeouts, the engine's own
  phases such as CUDA graph capture) are multiplied by `f`;
- byte counts (a twin's `expected_bytes_per_rank`, the weights `cluster sim make-weights --recipe`
  writes) are multiplied by `f`;
- so a read rate in bytes per second stays what it is (bytes x f / seconds x f): 16 MB/s in the
  simulator is 16 MB/s on the disk, and a load that took 80 minutes takes 80 x 60 x f seconds.

Engine log lines show configured values as configured (`self.watchdog_timeout=300`) and measured
values as measured on this machine (`elapsed=0.93 s`); the `[cluster-sim]` start line prints the
mapping. Only the engine's clock is scaled: launch skew between ranks (docker run over SSH, image
unpack) is real time, so engine *defaults* that guard against it have a floor (see `floor_s`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

ENV_SCALE = "CLUSTER_SIM_SCALE"

# Named scales. `default` makes an 8-rank boot of the mistral-large4-8x-sglang twin last about a
# minute (953 MB per rank at 16 MB/s), `test` about ten seconds (159 MB per rank), and with `test`
# stock SGLang's 480 s barrier window is exactly 1 s.
SCALES: dict[str, float] = {"real": 1.0, "default": 1 / 80, "test": 1 / 480}

# The engines' own phase durations in real seconds, before scaling. Where a seed measured one, it
# is cited; the rest are round guesses that only set the pace of the simulated boot.
REAL_PHASE_S: dict[str, float] = {
    # `python -m sglang.launch_server` / `vllm serve` import torch, triton and the model code
    # before the first rank line: tens of seconds on a GB10 (not measured in the seeds).
    "startup": 20.0,
    # NCCL/Gloo group creation after the TCP rendezvous (seed 000 has no multi-node timing).
    "init": 5.0,
    # KV cache profiling and allocation; seed 000: `Load weight end` 22:12:00 -> `KV Cache is
    # allocated` 22:12:02.
    "kv": 2.0,
    # FlashInfer autotune after the weights (seed 002 boot 3 crashed here); not measured.
    "autotune": 30.0,
    # seed 000: `Capture cuda graph end. Time elapsed: 65.47 s.`
    "graph": 65.47,
    # seed 000: graph end 22:13:08 -> `Application startup complete` 22:13:36 (draft load included).
    "http": 28.0,
    # SGLang's warmup request before `The server is fired up and ready to roll!`; not measured.
    "warmup": 5.0,
}

# Engine defaults that the simulator scales.
SGLANG_BARRIER_S = 480.0  # UNBALANCED_MODEL_LOADING_TIMEOUT_S in load_model_utils.py (DOMAIN.md)
SGLANG_WATCHDOG_S = 300.0  # --watchdog-timeout default (sglang PR #4848: watchdog_timeout=300)
DIST_TIMEOUT_S = 600.0  # torch's NCCL process-group default (10 min); vllm: "Timed out after 601 s"

# Real-time floors for engine *defaults* (an explicit flag is scaled exactly): ranks start
# seconds apart whatever the scale, and a scaled 600 s default (1.25 s under `test`) would turn
# ordinary launch skew into a rendezvous failure.
FLOOR_S: dict[str, float] = {"rendezvous": 60.0, "collective": 10.0}


@dataclass(frozen=True)
class Scale:
    """`factor` simulated seconds per real second (and simulated bytes per real byte)."""

    factor: float
    name: str

    def seconds(self, real_s: float) -> float:
        return real_s * self.factor

    def nbytes(self, real_bytes: int) -> int:
        return max(1, round(real_bytes * self.factor))

    def timeout(self, real_s: float, *, explicit: bool, floor: str | None = None) -> float:
        """A scaled engine timeout; an engine default (not `explicit`) keeps its floor."""
        scaled = real_s * self.factor
        if not explicit and floor is not None:
            scaled = max(scaled, min(FLOOR_S[floor], real_s))
        return scaled

    def describe(self) -> str:
        return (
            f"scale={self.name} factor={self.factor:.6g} (1 real s = {self.factor * 1000:.3g} ms)"
        )


class ScaleError(ValueError):
    pass


_FRACTION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)\s*$")


def parse_scale(text: str) -> Scale:
    """`test`, `default`, `real`, a number (`0.01`) or a fraction (`1/480`)."""
    value = text.strip()
    if value in SCALES:
        return Scale(SCALES[value], value)
    m = _FRACTION.match(value)
    try:
        factor = float(m.group(1)) / float(m.group(2)) if m else float(value)
    except (ValueError, ZeroDivisionError):
        raise ScaleError(
            f"scale {text!r}: expected one of {', '.join(SCALES)}, a number or a fraction "
            "like 1/480"
        ) from None
    if not 0 < factor <= 1:
        raise ScaleError(f"scale {text!r}: the factor must be in (0, 1], got {factor:g}")
    for name, known in SCALES.items():
        if abs(known - factor) < 1e-12:
            return Scale(known, name)
    return Scale(factor, "custom")


def resolve_scale(flag: str | None, env: Mapping[str, str] | None = None) -> Scale:
    """The flag wins over `CLUSTER_SIM_SCALE`; without either, `default`."""
    environ = os.environ if env is None else env
    text = flag if flag is not None else environ.get(ENV_SCALE)
    return parse_scale(text) if text else Scale(SCALES["default"], "default")

"""The bench's PNG: output tok/s, and TTFT/TPOT p50, against concurrency, one line per depth.

matplotlib with the Agg backend (no display on a controller or in CI), imported only here.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.serving_bench.model import BenchReport


def save_plot(report: BenchReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (thr, lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    depths = sorted({lv.depth for lv in report.levels})
    for depth in depths:
        levels = sorted(
            (lv for lv in report.levels if lv.depth == depth), key=lambda lv: lv.concurrency
        )
        conc = [lv.concurrency for lv in levels]
        thr.plot(conc, [lv.output_tok_s for lv in levels], marker="o", label=f"depth {depth}")
        ttft = [1000 * (lv.ttft.p50 or float("nan")) for lv in levels]
        tpot = [1000 * (lv.tpot.p50 or float("nan")) for lv in levels]
        lat.plot(conc, ttft, marker="o", label=f"TTFT p50, depth {depth}")
        lat.plot(conc, tpot, marker="s", linestyle="--", label=f"TPOT p50, depth {depth}")
    for ax in (thr, lat):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    thr.set_ylabel("output tokens/s")
    lat.set_ylabel("ms")
    cfg = report.config
    fig.suptitle(
        f"{report.recipe} · run {report.run_id} · pp{cfg.prompt_len}/tg{cfg.output_len}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

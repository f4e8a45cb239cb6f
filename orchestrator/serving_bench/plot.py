"""The bench's PNG: output tok/s, TTFT p50 and TPOT p50 against concurrency, one line per depth.

matplotlib with the Agg backend (no display on a controller or in CI), imported only here.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.models.bench import BenchReport


def save_plot(report: BenchReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (thr, ttft, tpot) = plt.subplots(1, 3, figsize=(14, 4.2))
    depths = sorted({lv.depth for lv in report.levels})
    levels_seen = sorted({lv.concurrency for lv in report.levels})
    for depth in depths:
        levels = sorted(
            (lv for lv in report.levels if lv.depth == depth), key=lambda lv: lv.concurrency
        )
        conc = [lv.concurrency for lv in levels]
        label = f"depth {depth}"
        thr.plot(conc, [lv.output_tok_s for lv in levels], marker="o", label=label)
        ttft.plot(conc, [1000 * (lv.ttft.p50 or float("nan")) for lv in levels], marker="o",
                  label=label)  # fmt: skip
        tpot.plot(conc, [1000 * (lv.tpot.p50 or float("nan")) for lv in levels], marker="o",
                  label=label)  # fmt: skip
    for ax, ylabel in (
        (thr, "output tokens/s"),
        (ttft, "TTFT p50 (ms)"),
        (tpot, "TPOT p50 (ms)"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels_seen, [str(c) for c in levels_seen])  # the levels, not powers of 2
        ax.minorticks_off()
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)  # from 0, and a flat line off the top edge
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
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

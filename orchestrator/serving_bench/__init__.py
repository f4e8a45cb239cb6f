"""`cluster bench`: measure a booted run's OpenAI-compatible endpoint, from the controller.

Named `serving_bench` so it is not taken for the top-level `bench/` folder, whose scripts
measure the orchestrator itself.

    model.py     what a bench is asked and what it found (pydantic: bench.json, `--json`)
    workload.py  the prompts: seeded, `depth` tokens of shared context then `pp` fresh ones
    stats.py     per-level figures from per-request timings (pure)
    client.py    one streamed chat request over httpx, timed chunk by chunk
    smoke.py     the smoke request a boot runs after READY
    sweep.py     the levels: depths x concurrency, each a closed loop of N clients
    render.py    the rich tables (one run, two runs side by side)
    plot.py      the PNG (matplotlib, Agg)
    runs.py      a run's endpoint, served model name, and the files the bench keeps in it
"""

# Two commands do all set-up on a fresh machine (python3, make, root):
#   make demo   runs the main job on the built-in simulated cluster
#   make test   runs lint, types and every test tier (installs what the netns tier needs when root)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint types unit system-deps engine-parsers clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# CPU torch for the netns tier's real Gloo all-reduce (`cluster nccl-check`). Pinned: pip
	# takes this version's CPU build from the machine's disk; a range would fetch a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/cluster boot mistral-large4-8x-sglang

system-deps:
	bash .ci/system-deps.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check orchestrator tests bench
	$(VENV)/bin/ruff format --check orchestrator tests bench

types: $(STAMP)
	$(VENV)/bin/mypy

# The engines tier's side environments: each pinned engine release's own argument parser
# (tests/engines/parsers/), installed with --no-deps next to .venv's CPU torch. Idempotent.
engine-parsers: $(STAMP)
	bash tests/engines/install-parsers.sh $(PY)

# The tiers in five lanes side by side: the netns tier on three testbeds; the built-in cluster
# (tests/sim, tests/terminal and any module naming it), then the engines tier; the engines'
# parsers installed (engine-parsers), then the rest (tests/run_tiers.sh).
test: system-deps lint types
	bash tests/run_tiers.sh $(PY)

clean:
	rm -rf $(VENV) .engines

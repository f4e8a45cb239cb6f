"""The built-in engine simulator: a faithful stand-in for SGLang and vLLM multi-node boots.

Run as `python -m orchestrator.simulator sglang|vllm [serve] ARGS...` with the engine's own
flags. It rendezvouses over real TCP, reads real weight files in a child process, speaks the
engines' log dialects line for line, meets at SGLang's post-load barrier, serves an
OpenAI-compatible API on rank 0 and fails, on request, with the real failure texts. One factor
scales engine time (timescale.py). `docs/simulator.md` is the reference for people.

Only the standard library is used at run time (a test container may bind-mount the host's
Python read-only); `twin.py`, which turns a real recipe into its simulated twin, is the one
module that needs the project's models.
"""

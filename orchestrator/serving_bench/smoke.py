"""The smoke request: is the booted model really answering, under the name the recipe serves?

Two calls: `GET /v1/models` must list the served model name, and a fixed chat prompt, streamed,
must come back non-empty from that model. What came back is kept in the run: smoke.json (the
verdict, the answer, a failure's one line) and smoke-response.txt (the raw exchange).
"""

from __future__ import annotations

import httpx

from orchestrator.models.bench import SmokeResult
from orchestrator.serving_bench.client import _short, chat_body, keep, stream_chat

SMOKE_PROMPT = "Reply with one short sentence: which model are you, and are you ready?"
SMOKE_MAX_TOKENS = 64


async def served_models(
    client: httpx.AsyncClient, base_url: str, timeout_s: float, transcript: list[str] | None = None
) -> list[str]:
    """The ids `GET /v1/models` lists; httpx errors and ValueError (a body that is not the
    OpenAI list) propagate."""
    response = await client.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s)
    keep(transcript, f"GET /v1/models -> HTTP {response.status_code}\n{response.text}\n")
    if response.status_code != 200:
        raise ValueError(f"GET /v1/models: HTTP {response.status_code}: {_short(response.text)}")
    try:
        data = response.json().get("data")
    except ValueError:
        raise ValueError(f"GET /v1/models: not JSON: {_short(response.text)!r}") from None
    if not isinstance(data, list):
        raise ValueError(f"GET /v1/models: no model list: {_short(response.text)}")
    return [str(m.get("id")) for m in data if isinstance(m, dict)]


async def smoke(
    base_url: str, model: str, timeout_s: float = 60.0, transcript: list[str] | None = None
) -> SmokeResult:
    """The smoke request; `transcript` (a list) collects the raw exchange for the run."""
    async with httpx.AsyncClient() as client:
        try:
            models = await served_models(client, base_url, timeout_s, transcript)
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            keep(transcript, f"[{type(exc).__name__}: {exc}]")
            return SmokeResult(
                ok=False,
                endpoint=base_url,
                expected_model=model,
                problem=f"GET /v1/models failed: {_short(str(exc)) or type(exc).__name__}",
            )
        body = chat_body(model, SMOKE_PROMPT, SMOKE_MAX_TOKENS, ignore_eos=False)
        body["stream_options"] = {"include_usage": True}
        r = await stream_chat(client, base_url, body, timeout_s, transcript)
    problem = r.error
    if not problem and model not in models:
        problem = f"the server lists {models or 'no model'}, not {model!r}"
    elif not problem and not (r.text.strip() or r.reasoning.strip()):
        problem = "the answer is empty"
    elif not problem and r.model != model:
        problem = f"the answer came from model {r.model!r}, not {model!r}"
    return SmokeResult(
        ok=not problem,
        endpoint=base_url,
        expected_model=model,
        served_models=tuple(models),
        answered_model=r.model,
        answer=r.text,
        reasoning=r.reasoning,
        latency_s=r.e2e_s,
        problem=problem,
    )

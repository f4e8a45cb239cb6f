"""What both engines print through shared libraries: tqdm, uvicorn, NCCL, torch, Python."""

from __future__ import annotations

from orchestrator.dialects.base import Milestone as M
from orchestrator.dialects.base import marker

SHARDS_DESC = "Loading safetensors checkpoint shards"  # the weight loaders' tqdm description

MARKERS = (
    # `Loading safetensors checkpoint shards:  50% Completed | 1/2 [...]` (groups: done, total)
    marker(
        M.shards,
        None,
        "checkpoint shards",
        r"Loading safetensors checkpoint shards:\s+(\d+)%[^|]*\|\s*(\d+)/(\d+)",
    ),
    # transformers' own loader (from_pretrained; FastChat-style model workers, TGI's older
    # shards): `Loading checkpoint shards:  43%|████▎     | 3/7 [00:10<00:13, ...]`
    marker(
        M.shards,
        None,
        "Loading checkpoint shards:",
        r"Loading checkpoint shards:\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+)",
    ),
    # NCCL picked its bootstrap interface: communicator setup has begun
    marker(M.dist_begin, None, "NCCL INFO Bootstrap", r"NCCL INFO Bootstrap ?: ?Using"),
    # torch's store is being created (a Python trace stopping here hangs in the rendezvous)
    marker(M.dist_begin, None, "TCPStore(", r"TCPStore\("),
    # vLLM's Ray executor joined the cluster: the workers' placement begins
    marker(M.dist_begin, None, "Connected to Ray cluster"),
    # ... or, with no cluster to join, started one of its own (`ray.init()`: "Started a local
    # Ray instance."): the executor's set-up, before any weight is read
    marker(M.dist_begin, None, "Started a local Ray instance"),
    # NCCL's communicator is up (NCCL_DEBUG=INFO): `comm 0x... rank 0 nranks 8 ... Init COMPLETE`
    marker(M.dist_init, None, "Init COMPLETE", r"NCCL INFO .*Init COMPLETE"),
    marker(M.dist_init, None, "Connected all rings", r"NCCL INFO Connected all rings"),
    # uvicorn: the HTTP server took its port
    marker(M.ready, None, "Application startup complete"),
    marker(M.ready, None, "Uvicorn running on"),
    # uvicorn's access log: a request answered 200
    marker(M.traffic, None, "HTTP/1.1", r'"(?:GET|POST) /\S* HTTP/1\.1" 200'),
    # ollama (server.go), for pasted logs: its llama.cpp runner answers, and gin's access log
    # of a model request answered 200 (not `HEAD /`, `/api/tags`: those need no model)
    marker(M.ready, None, "llama runner started in", r"llama runner started in [\d.]+ ?m?s"),
    # other servers' own ready lines, for pasted logs: Triton's endpoints, llama.cpp's server (its
    # JSON log), ComfyUI, MindIE. Not TGI's router "Connected": it is printed before the first
    # request reaches the shards, and a third-set log failed right there (a-0079); a fifteenth-set
    # log printed it after a tokenizer config the router could not parse (w-0016: every chat
    # request then failed), and with that rule off (leave-one-source-out) it was called `ready`
    marker(M.ready, None, "Started HTTPService at", r"Started HTTPService at \S+:\d+"),
    marker(M.ready, None, "Started GRPCInferenceService at"),
    # Triton 20.x named its gRPC endpoint GRPCService (and only "Starting HTTPService")
    marker(M.ready, None, "Started GRPCService at", r"Started GRPCService at \S+:\d+"),
    # TensorFlow Serving once its models are loaded (server.cc builds the model server, which
    # loads them, before it exports its endpoints: "Exporting HTTP/REST API at:localhost:8501
    # ..."; the thirty-ninth set)
    marker(M.ready, None, "Exporting HTTP/REST API at:", r"Exporting HTTP/REST API at:\S+:\d+"),
    # MindIE's server (Ascend): "[system] [server] [Start mindie server] [success]"
    marker(M.ready, None, "[Start mindie server] [success]"),
    # Ray Serve's CLI once the application's replicas are up ("SUCC scripts.py:550 -- Deployed
    # Serve app successfully."; the twenty-fifth set, n-0004)
    marker(M.ready, None, "Deployed Serve app successfully"),
    # Not ollama's `Listening on HOST:PORT (version V)`: its server is up before any model is
    # loaded, and the sets label such a start-up `no-failure` as often as `ready` (r-0040, k-0010)
    marker(M.ready, None, '"msg":"HTTP server listening"'),
    # llama-server once its model is loaded ("main: server is listening on http://HOST:PORT -
    # starting the main loop"); not its early "HTTP server is listening, hostname: ..."
    marker(M.ready, None, "server is listening on", r"server is listening on https?://"),
    # the older llama.cpp server's JSON log once its model is loaded (it serves next)
    marker(M.ready, None, '"message":"model loaded"'),
    marker(M.ready, None, "To see the GUI go to:", r"To see the GUI go to: https?://"),
    # Not LM Studio's `[LM STUDIO SERVER] Success! HTTP server listening on port N`: as ollama's
    # `Listening on`, it is printed before any model is loaded (a request names one), and the
    # sets label it `ready` (fourteenth v-0021) and `no-failure` (twenty-fifth p-0012)
    # llama.cpp's loader starts (the 2023 ggml loader's line, the GGUF loader's first): a web
    # UI's own URL printed before it is not the model serving (the twentieth set, u-0013)
    marker(M.load_begin, None, "llama.cpp: loading model from"),
    marker(M.load_begin, None, "llama_model_loader: loaded meta data"),
    # llama.cpp's server taking a request into a slot: printed only while it serves (its JSON
    # log of 2024, as ollama's runner printed it; the plain log of 2025)
    marker(M.traffic, None, '"msg":"slot is processing task"'),
    marker(
        M.traffic,
        None,
        "| processing task",
        r"launch_slot_: id +\d+ \| task \d+ \| processing task",
    ),
    # llama.cpp's server timing a request it decodes ("slot print_timing: id  3 | task 0 |
    # n_decoded = 1196, tg = 12.91 t/s"; 2026, the forty-third set): printed only while serving
    marker(
        M.traffic,
        None,
        "slot print_timing:",
        r"slot print_timing: id +\d+ \| task \d+ \|",
    ),
    # llama.cpp's server access log (log_server_request, 2024-2025): "request: POST
    # /completion 127.0.0.1 200" (a 503 is its answer while still loading; the twenty-eighth
    # set, y-0014)
    marker(M.traffic, None, "request: ", r"request: (?:GET|POST) /\S+ \S+ 200\b"),
    # Triton's verbose log of an inference request it took ("infer_request.cc:893] [request
    # id: <id>] prepared:"; the twenty-ninth set): printed only while it serves
    marker(
        M.traffic, None, "] prepared:", r"infer_request\.cc:\d+\] \[request id: [^\]]*\] prepared:"
    ),
    # vLLM's P/D router relaying a request its prefill (or decode) engine answered ("Prefill
    # response status: 200 OK", vllm-project/router; the thirtieth set)
    marker(M.traffic, None, "response status: 200", r"(?:Prefill|Decode) response status: 200 OK"),
    # LMCache storing a request's KV chunks in the engine (printed only while it serves one;
    # the thirtieth set)
    marker(
        M.traffic,
        None,
        "Storing KV cache for",
        r"Storing KV cache for \d+ out of \d+ tokens .*for request ",
    ),
    # text-embeddings-inference's router once its backend is up ("router/src/http/server.rs:
    # 1556: Ready"; the thirtieth set)
    marker(
        M.ready,
        None,
        "text_embeddings_router::",
        r"text_embeddings_router::(?:http|grpc)::server: \S+:\d+: Ready\s*$",
    ),
    # text-embeddings-inference answering requests ("openai_embed{total_time=...}:
    # text_embeddings_router::http::server: router/src/http/server.rs:1290: Success"; the
    # thirty-eighth set)
    marker(
        M.traffic,
        None,
        "text_embeddings_router::http::server",
        r"text_embeddings_router::http::server: \S+:\d+: Success\s*$",
    ),
    # infinity_emb's batch handler once its model is warmed up ("ready to batch requests.";
    # rich wraps it after "ready" in a narrow terminal; the thirty-first set)
    marker(
        M.ready,
        None,
        "infinity_emb INFO: ready",
        r"infinity_emb INFO: ready(?: to batch requests\.|\s+batch_handler\.py)",
    ),
    # text-generation-webui's own line once its model is in memory ("INFO:Loaded the model in
    # 5.26 seconds."; the eighth and thirty-seventh sets)
    marker(M.load_end, None, "Loaded the model in", r"Loaded the model in [0-9.]+ seconds"),
    # gradio, as text-generation-webui launches it, with or without a model loaded
    marker(
        M.ready,
        None,
        "Running on local URL:",
        r"Running on local URL: +https?://",
        needs_a_model=True,
    ),
    marker(
        M.traffic,
        None,
        "[GIN]",
        r'\[GIN\] .*\| 200 \|.*\| +POST +"/(?:api/(?:chat|generate|embed|embeddings)|v1/\S+)"',
    ),
    marker(M.error, None, "Traceback", r"Traceback \(most recent call last\)"),
    marker(M.error, None, "ERROR", r"\bERROR\b"),
    marker(M.error, None, "Error:"),
)

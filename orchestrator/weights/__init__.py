"""Stage a model's weights on every node's own disk, verified, through the images' pipelined
chain (`docs/weights.md`).

Pure core, thin edge:

    manifest.py      pure: the manifest (path, size, sha256), its id, what a node lacks
    checks.py        pure over files: safetensors headers, the index, config/tokenizer files
    plan.py          pure: the destination and its allowed root, needs, free space, groups
    model.py         holdings, options, per-node results, the report, progress events
    source.py        the source directory: walk, refuse, known sums (hub cache, our record)
    node_program.py  what runs on a node (stdlib only): send, recv, probe, warm
    nodes.py         asking every node (`probe`) into holdings
    push.py          push_weights: rounds over images' chain, re-probe, re-send, report
    status.py        weights_status, decide_warm, warm_nodes
    copy_probe.py    the preflight's probe of a node's staged copy (CopyFacts)

Import the module you need (`orchestrator.weights.push.push_weights`, `.status.weights_status`,
`.copy_probe.copy_probe`): this package imports nothing itself, so preflight's facts can ask the
copy probe without loading the push machinery.
"""

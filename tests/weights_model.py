"""A real-looking model directory for `cluster weights` tests and the bench: safetensors shards
in the format's own layout (8-byte header length, JSON header, data; random data, since real
weights do not compress), the index that names every tensor, a config and a tokenizer."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path


def write_safetensors(path: Path, tensors: dict[str, int]) -> None:
    """`tensors`: name -> bytes of bf16 data (a 1-D tensor each). Random content."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, nbytes in tensors.items():
        header[name] = {
            "dtype": "BF16",
            "shape": [nbytes // 2],
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        left = offset
        while left > 0:
            n = min(left, 4 << 20)
            f.write(os.urandom(n))
            left -= n


def make_model(root: Path, *, shards: int = 4, shard_bytes: int = 4 << 20) -> Path:
    """A model of `shards` shards of about `shard_bytes` each; returns `root`."""
    root.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    per_tensor = shard_bytes // 4
    per_tensor -= per_tensor % 2
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {f"model.layers.{i}.mlp.w{j}.weight": per_tensor for j in range(4)}
        write_safetensors(root / name, tensors)
        weight_map.update(dict.fromkeys(tensors, name))
    index = {"metadata": {"total_size": per_tensor * 4 * shards}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    (root / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (root / "generation_config.json").write_text("{}")
    return root

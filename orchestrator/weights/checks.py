"""Is the source a loadable model? (before any byte moves): every safetensors header parses and
its tensors lie inside the file, every tensor `model.safetensors.index.json` names is in the
shard it names, and the config and tokenizer files an engine reads are there, unless the
recipe's flags say the engine reads others (Mistral's `params.json` and `tekken.json`)."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path

from orchestrator.models.recipe import flag_value
from orchestrator.weights.manifest import Manifest

MAX_HEADER = 100 << 20  # the safetensors format's own bound on the JSON header
INDEX = "model.safetensors.index.json"
CONFIGS = ("config.json",)
MISTRAL_CONFIGS = ("params.json",)
TOKENIZERS = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")
MISTRAL_TOKENIZERS = ("tekken.json", "tokenizer.model.v3", "tokenizer.model")


def safetensors_names(path: Path, size: int) -> tuple[set[str], str | None]:
    """The tensor names of one safetensors file, or why its header is not one."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return set(), "shorter than a safetensors header"
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER or 8 + n > size:
                return set(), f"header length {n} does not fit the file ({size} bytes)"
            header = json.loads(f.read(n))
    except OSError as exc:
        return set(), f"cannot read it ({exc.strerror})"
    except ValueError as exc:
        return set(), f"header is not JSON ({exc})"
    if not isinstance(header, dict):
        return set(), "header is not a JSON object"
    data = size - 8 - n
    names = set()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data
        ):
            return set(), f"tensor {name}: data_offsets {offsets} outside the {data} data bytes"
        names.add(name)
    return names, None


def check_model(root: Path, manifest: Manifest, engine_args: Sequence[str] = ()) -> list[str]:
    """One line per problem (empty: loadable as far as files can tell)."""
    problems: list[str] = []
    present = {f.path for f in manifest.files}
    sizes = {f.path: f.size for f in manifest.files}
    names: dict[str, set[str]] = {}
    for rel in sorted(p for p in present if p.endswith(".safetensors")):
        got, why = safetensors_names(root / rel, sizes[rel])
        if why:
            problems.append(f"{rel}: not a valid safetensors file: {why}")
        names[rel] = got
    if INDEX in present:
        try:
            index = json.loads((root / INDEX).read_text(encoding="utf-8"))
            weight_map = index["weight_map"]
            assert isinstance(weight_map, dict)
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            problems.append(f"{INDEX}: not a safetensors index (no weight_map object)")
            weight_map = {}
        absent: dict[str, list[str]] = {}
        for tensor, shard in weight_map.items():
            if shard not in present:
                absent.setdefault(str(shard), []).append(tensor)
            elif tensor not in names.get(shard, set()):
                problems.append(f"{INDEX}: tensor {tensor} is not in {shard}")
        for shard, tensors in sorted(absent.items()):
            problems.append(f"{INDEX} names {shard} ({len(tensors)} tensors); it is missing")
    mistral = any(
        flag_value(engine_args, f) == "mistral"
        for f in ("--tokenizer-mode", "--config-format", "--load-format")
    )
    configs = CONFIGS + (MISTRAL_CONFIGS if mistral else ())
    if not present & set(configs):
        problems.append(
            f"no {' or '.join(configs)} at the top of the model"
            + ("" if mistral else " (a Mistral consolidated model: the recipe's --config-format)")
        )
    if flag_value(engine_args, "--tokenizer") is None:  # a tokenizer elsewhere: not ours to check
        toks = TOKENIZERS + (MISTRAL_TOKENIZERS if mistral else ())
        if not present & set(toks):
            problems.append(
                f"no tokenizer file ({', '.join(toks)})"
                + (
                    ""
                    if mistral
                    else "; tekken.json counts when the recipe says --tokenizer-mode mistral"
                )
            )
    return problems

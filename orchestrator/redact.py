"""Secrets never reach a disk or a terminal: one redaction for every writer and printer.

A value is a secret when

* its mapping key or env name says so (`HF_TOKEN`, `MY_PASSWD`, `HF_AUTH`, `CREDENTIALS`,
  `AWS_SECRET_ACCESS_KEY`, …): `SECRET_NAME_RE`;
* it follows a flag that says so, in an argv (`--api-key sk-…`, `--hf-token=hf_…`,
  `-e HF_TOKEN=…`);
* it has the shape of a well-known token (`hf_…`, `sk-…`, `ghp_…`, AWS access key ids),
  wherever it appears in a string: the last line of defence for a secret in a free-form place.

Redaction replaces the value with `<redacted>` and keeps the name, so a reader still sees that
the variable or flag was set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

REDACTED = "<redacted>"
SECRET_NAME_RE = re.compile(
    r"TOKEN(?!S|IZ)|KEY|SECRET|PASS(?:W|PHRASE|$|_|-)|PWD|AUTH|CREDENTIAL|COOKIE",
    re.IGNORECASE,
)
"""`--max-total-tokens` and `--tokenizer` are engine flags, not secrets; `PWD` alone is the
working directory, and a name ending in `_file`/`_path` (`ansible_ssh_private_key_file`,
`--hf-token-file`) holds where a secret is, not the secret: `is_secret_name` lets them
through."""
_PATH_NAME_RE = re.compile(r"[_-](?:FILE|PATH|DIR)$|^private_key$", re.IGNORECASE)
"""`private_key` is `Node.private_key`: the path of the SSH key file (ansible_ssh_private_key_file),
which a copied run needs to reach its nodes again."""
TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b"
)
_FLAG = re.compile(r"^--?[A-Za-z][\w.-]*$")


def is_secret_name(name: str) -> bool:
    return (
        bool(SECRET_NAME_RE.search(name))
        and name.upper() != "PWD"
        and not _PATH_NAME_RE.search(name)
    )


def redact(value: Any) -> Any:
    """A copy of `value` with secrets replaced (module doc: by name, by flag, by shape)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if is_secret_name(str(k)) and _is_secret_value(v) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return redact_argv(value)
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_argv(items: list[Any] | tuple[Any, ...]) -> list[Any]:
    """A list: `NAME=value` entries, the value after a secret-named flag, token shapes."""
    out: list[Any] = []
    secret_next = False
    for item in items:
        if not isinstance(item, str):
            out.append(redact(item))
            secret_next = False
            continue
        if secret_next:
            out.append(REDACTED)
            secret_next = False
            continue
        flag, eq, _ = item.partition("=")
        if _FLAG.match(flag) and is_secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(item)
                secret_next = True
            continue
        out.append(_redact_assignment(item))
    return out


def redact_text(text: str) -> str:
    """Well-known token shapes inside free text (a log message, an error line)."""
    return TOKEN_SHAPES.sub(REDACTED, text) if text else text


def _is_secret_value(v: Any) -> bool:
    """A value that could hold a secret: not None, not a boolean (`use_auth: false`), not ''."""
    return isinstance(v, str | int | float) and not isinstance(v, bool) and v != ""


def _redact_assignment(text: str) -> str:
    name, sep, _ = text.partition("=")
    if sep and name and " " not in name and is_secret_name(name):
        return f"{name}={REDACTED}"
    return redact_text(text)

#!/usr/bin/env bash
# Install every pinned engine release's argument parser into its own side directory, for the
# engines test tier (tests/engines/). `make test` runs this. Each parsers/ENGINE-RELEASE.txt lists
# the release's wheel and what importing its parser needs, every line ==pinned; --no-deps keeps it
# to exactly those (the engines' own requirements pull CUDA torch and GPU kernels, which parsing
# never touches). The CPU torch of .venv is reused: the side directories go on PYTHONPATH.
# Usage: bash tests/engines/install-parsers.sh [PYTHON]   (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${1:-.venv/bin/python}
DEST_ROOT=${ENGINE_PARSERS_DIR:-.engines}
mkdir -p "$DEST_ROOT"
for pins in tests/engines/parsers/*.txt; do
  name=$(basename "$pins" .txt)
  dest="$DEST_ROOT/$name"
  if [ -f "$dest/.installed" ] && cmp -s "$pins" "$dest/.installed"; then
    continue
  fi
  echo "engines tier: installing the $name parser into $dest"
  rm -rf "$dest"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-compile \
    --target "$dest" -r "$pins"
  cp "$pins" "$dest/.installed"
done
# The side directories hold the same files many times over (triton 3.9.0, 1 GB, in four of them;
# transformers, tokenizers...): util-linux's hardlink links byte-identical files, which keeps the
# tier's disk use near 4 GB rather than 8 (a CI disk can be nearly full). Nothing changes for an
# import; a later reinstall of one directory removes its own links only. -t: pip gives each copy
# its own install time, which hardlink would otherwise take for a difference (3.2 GiB saved).
if command -v hardlink >/dev/null; then
  hardlink -q -t "$DEST_ROOT" || echo "engines tier: hardlink failed; the side directories stay unlinked" >&2
fi

"""Text from users and nodes, made harmless for the operator's terminal.

C0 controls but tab, DEL and C1: ESC starts CSI/OSC sequences (colours, titles, hyperlinks,
clipboard writes), BEL rings, CR rewrites the line. A log line or a name read back from a node
is not ours to let drive the operator's terminal; the preserved files keep every byte.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def harmless(text: str) -> str:
    """`text` with every terminal control character shown as a visible `\\xNN` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)

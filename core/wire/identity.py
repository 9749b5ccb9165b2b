"""What a node id may be: both sides check it with the same rule."""

from __future__ import annotations

import re

# Host names, Kubernetes node names, cloud instance ids: letters, digits and . _ : - ; at most 253.
NODE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,252}")


def check_node_id(node_id: str) -> str:
    """``node_id`` if it is a valid node id, else ``ValueError`` naming it."""
    if not NODE_ID_RE.fullmatch(node_id):
        raise ValueError(f"invalid node id {node_id!r}: use letters, digits and . _ : - (at most 253)")
    return node_id

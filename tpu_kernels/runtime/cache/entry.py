"""The file format of an on-disk entry: a serialized executable with the key that asked for it.

    magic (8 bytes) | header length (4) | payload length (8) | SHA-256 of header + payload (32)
    | header (JSON: format, key, op, argument and result types, ...) | payload (the executable)

`decode` accepts an entry only if every part checks: the magic, both lengths against the
file's, the checksum, the format and the key written inside, which must be the key the
reader computed from its own trace. A file that another key's entry was copied or renamed
to, a truncated or corrupted one, or one of another format is `Rejected`, never loaded.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

FORMAT = 2  # 1: jax.export modules keyed by a source fingerprint (before the program key)
MAGIC = b"TPUKEXE2"
_PREFIX = len(MAGIC) + 4 + 8 + 32


class Rejected(Exception):
    """An entry that fails a check; never used. `str()` says which check."""


def encode(key: str, header: dict[str, Any], payload: bytes) -> bytes:
    meta = json.dumps({**header, "format": FORMAT, "key": key}, sort_keys=True).encode()
    body = meta + payload
    return (
        MAGIC
        + len(meta).to_bytes(4, "little")
        + len(payload).to_bytes(8, "little")
        + hashlib.sha256(body).digest()
        + body
    )


def prefix_size() -> int:
    """How many bytes `expected_size` needs to read."""
    return _PREFIX


def expected_size(prefix: bytes) -> int:
    """The whole entry's size as its first bytes state it (Rejected if they are not an entry's)."""
    if len(prefix) < _PREFIX or prefix[: len(MAGIC)] != MAGIC:
        raise Rejected("no tpu_kernels entry header (another format, or not an entry)")
    n_meta = int.from_bytes(prefix[8:12], "little")
    n_payload = int.from_bytes(prefix[12:20], "little")
    return _PREFIX + n_meta + n_payload


def decode(data: bytes, key: str) -> tuple[dict[str, Any], bytes]:
    """(header, payload) of the entry in `data`, if every check passes for `key`."""
    size = expected_size(data[:_PREFIX])
    if len(data) != size:
        raise Rejected(f"length {len(data)} bytes, but the header says {size} (truncated or appended to)")
    n_meta = int.from_bytes(data[8:12], "little")
    body = data[_PREFIX:]
    if hashlib.sha256(body).digest() != data[20:_PREFIX]:
        raise Rejected("checksum mismatch (corrupted)")
    try:
        header = json.loads(body[:n_meta])
    except ValueError as e:
        raise Rejected(f"unreadable header: {e}") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise Rejected("another format's entry")
    if header.get("key") != key:
        raise Rejected("another key's entry (copied or renamed onto this one)")
    return header, body[n_meta:]


__all__ = ["FORMAT", "Rejected", "decode", "encode", "expected_size", "prefix_size"]

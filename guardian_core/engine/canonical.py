"""Canonical JSON and SHA-256 hashes: the same value gives the same bytes in any process and
any Python version (sorted keys, no spaces, UTF-8, no NaN or infinity)."""

import hashlib
import json


def canonical_json(value: object) -> str:
    """The one JSON text of `value`; raises ValueError on NaN/inf, TypeError on non-JSON types."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_hex(value: object) -> str:
    """SHA-256 of the canonical JSON of `value`, as 64 hex digits."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()

"""Key → key group, the unit of assignment, load accounting and state migration.

The hash is **xxHash64 of the key's UTF-8 bytes with seed 42**, read as an unsigned 64-bit
integer, modulo p. Why this one and not murmur3 or Python's ``hash()``:

* ``hash()`` is salted per process (PYTHONHASHSEED), so two Spark workers would disagree.
* Spark SQL's built-in ``xxhash64(col)`` is exactly xxHash64 with seed 42 over the UTF-8
  bytes of a string (it returns the same bits as a signed long). The streaming job can
  therefore compute groups natively in the JVM and land on the same group as this module,
  the simulator and the batch jobs. Spark's ``hash()`` (murmur3) is *not* the standard
  murmur3 for lengths that are not a multiple of four, so it would not match a library.

``spark_group_expr_sql`` gives the matching Spark SQL expression; a test checks the two
agree on real keys.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import xxhash

SEED = 42
DEFAULT_GROUPS = 4096
_TWO_64 = 1 << 64


def stable_hash(key: str) -> int:
    """Unsigned 64-bit xxHash64(seed 42) of the key's UTF-8 bytes."""
    return xxhash.xxh64_intdigest(key.encode("utf-8"), seed=SEED)


def group_of(key: str, groups: int = DEFAULT_GROUPS) -> int:
    """Key group of one key: ``stable_hash(key) mod groups``."""
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    return stable_hash(key) % groups


def groups_of(keys: Iterable[str], groups: int = DEFAULT_GROUPS) -> np.ndarray:
    """Key groups of many keys as an int64 array (one C hash call per key)."""
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    h = xxhash.xxh64_intdigest
    return np.fromiter((h(k.encode("utf-8"), seed=SEED) % groups for k in keys), dtype=np.int64)


def spark_group_expr_sql(column: str, groups: int = DEFAULT_GROUPS) -> str:
    """Spark SQL expression that computes :func:`group_of` on a string column.

    Spark's ``xxhash64`` returns the signed reading h_s of the unsigned hash h_u, with
    h_u = h_s + 2^64 when h_s < 0. Hence h_u mod p = (pmod(h_s, p) + 2^64 mod p) mod p for
    negative h_s, which is what the CASE expression computes without overflow.
    """
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    offset = _TWO_64 % groups
    h = f"xxhash64(CAST({column} AS STRING))"
    return (
        f"CAST(CASE WHEN {h} < 0 THEN pmod(pmod({h}, {groups}) + {offset}, {groups}) "
        f"ELSE pmod({h}, {groups}) END AS INT)"
    )

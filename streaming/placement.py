"""Placement keys: for each engine slot, a key that Spark's ``repartition(slots, key)`` sends
to exactly that shuffle partition. With pkey = keys[engine] on every row of an engine,
partition e holds exactly engine e's rows, so the engine stage has one task per engine and
the task's partition index is its engine id, with Spark's Arrow path and no Python shuffle
(:class:`keyshift.streaming.job.StreamJob`).

Spark routes a row to partition pmod(hash(key), slots), where ``hash`` is Murmur3 x86_32
with seed 42 (``Murmur3Hash``; for a long, ``Murmur3_x86_32.hashLong``). Computed here, the
keys cost no Spark job at a run's start, and a ``keyshift run`` says "running" about 1 s
sooner (10.0-10.2 s against 10.8-11.4 s); the whole run takes as long, since its first
batch is then the JVM's first Spark job and pays that warm-up
(bench/results/spark_driver_startup.md)."""

from __future__ import annotations

_SEED = 42  # Spark's seed for hash() and for the repartition of a column
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & _MASK, 15) * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def spark_hash_long(value: int, seed: int = _SEED) -> int:
    """Spark SQL's ``hash(value)`` of a LONG (a signed 32-bit int, as Spark returns it)."""
    v = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK, _mix_k1(v & _MASK))
    h1 = _fmix(_mix_h1(h1, _mix_k1(v >> 32)), 8)
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def placement_keys(slots: int) -> list[int]:
    """For each partition e of ``slots``, the smallest non-negative long whose Spark hash
    lands in partition e: pmod(hash(key), slots) == e. About slots·ln(slots) hashes of a
    few microseconds each, so a batch asks again rather than keeping them."""
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    found: dict[int, int] = {}
    key = 0
    while len(found) < slots:
        found.setdefault(spark_hash_long(key) % slots, key)  # Python's % is pmod for n > 0
        key += 1
    return [found[e] for e in range(slots)]

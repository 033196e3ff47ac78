"""Realistic synthetic events for the four applications, with skewed keys.

A generator is built cheaply (scikit-learn manners: no work in ``__init__``); the key domain
and its vocabulary are made on the first :meth:`EventGenerator.batch`. Random draws for a
whole batch are vectorised; only the final dict per event is built in Python, because the
producer has to serialise one JSON object per event anyway.

* ``wordcount``: words of English with their real frequency ranking (``wordfreq``), so
  exponent ≈ 1 is the natural Zipf law of text; key = the word.
* ``fsd``: short texts about "stories"; each story has topical words and its key is the
  LSH bucket of those words (``keyshift.apps.fsd.lsh_key``), so a trending story is a hot key
  while the text around it varies.
* ``traffic``: bus reports in Dublin's 0.01° grid cells (the elastic-cep data's city),
  key = the cell (``keyshift.apps.traffic.area_of``), with delays and congestion flags.
* ``clicks``: page views of sessions on a site with a Zipf-popular set of pages,
  key = the session id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from keyshift.apps.fsd import lsh_key
from keyshift.apps.traffic import area_of
from keyshift.workloads.skew import KeySampler, SkewSchedule, WorkloadInputError

# Dublin's bus network, roughly: the bounding box the SIRI positions fall in.
DUBLIN_LON = (-6.40, -6.10)
DUBLIN_LAT = (53.28, 53.42)
CELL_DEG = 0.01


def english_words(n: int) -> list[str]:
    """The ``n`` most frequent English words, most frequent first (maintained word lists)."""
    try:
        from wordfreq import top_n_list
    except ImportError as exc:  # the spark extra brings wordfreq
        raise WorkloadInputError(
            "app", "text generators need the 'wordfreq' package (pip install 'keyshift[spark]')"
        ) from exc
    words = [w for w in top_n_list("en", n * 2) if w.isalpha()]
    return words[:n]


class EventGenerator(ABC):
    """Base: ``batch(count, t_s, now_ms)`` gives ``count`` events of one application."""

    app = ""
    default_keys = 1000

    def __init__(self, keys: int | None = None, skew: SkewSchedule | str = "zipf:1.0",
                 seed: int = 0, producer_id: str = "p0") -> None:
        self.keys = keys
        self.skew = skew
        self.seed = seed
        self.producer_id = producer_id

    def _setup(self) -> None:
        n = self.keys or self.default_keys
        if n < 1:
            raise WorkloadInputError("keys", f"must be >= 1, got {n}")
        skew = self.skew if isinstance(self.skew, SkewSchedule) else SkewSchedule.parse(self.skew)
        self._rng = np.random.default_rng(self.seed)
        self._seq = 0
        self._domain = self._make_domain(n)
        self._sampler = KeySampler(len(self._domain), skew, seed=self.seed, order=self._order())

    def _order(self) -> np.ndarray | None:
        return None

    def batch(self, count: int, t_s: float, now_ms: int) -> list[dict[str, Any]]:
        """``count`` events at ``t_s`` seconds into the schedule, stamped ``now_ms``."""
        if not hasattr(self, "_sampler"):
            self._setup()
        idx = self._sampler.sample(count, t_s, self._rng)
        events = self._payloads(idx)
        for e in events:
            e["id"] = f"{self.producer_id}-{self._seq}"
            e["ts"] = now_ms
            self._seq += 1
        return events

    @abstractmethod
    def _make_domain(self, n: int) -> list[Any]:
        """The key domain (with whatever each key needs to make its payloads)."""

    @abstractmethod
    def _payloads(self, idx: np.ndarray) -> list[dict[str, Any]]:
        """Events (key and payload) for the sampled domain indices."""


class WordCountGenerator(EventGenerator):
    app = "wordcount"
    default_keys = 5000

    def _make_domain(self, n: int) -> list[str]:
        return english_words(n)

    def _order(self) -> np.ndarray:
        return np.arange(len(self._domain))  # rank = the word's real frequency rank

    def _payloads(self, idx: np.ndarray) -> list[dict[str, Any]]:
        d = self._domain
        return [{"key": d[i], "word": d[i]} for i in idx.tolist()]


class HeavyGenerator(WordCountGenerator):
    """Words for the CPU-heavy rule (:mod:`keyshift.apps.heavy`): the word-count events."""

    app = "heavy"


class FsdGenerator(EventGenerator):
    app = "fsd"
    default_keys = 500
    topical_words = 4
    filler_words = 6

    def _make_domain(self, n: int) -> list[tuple[str, list[str]]]:
        vocab = english_words(3000)
        self._stop = np.array(vocab[:150], dtype=object)
        content = vocab[150:]
        rng = np.random.default_rng(self.seed + 1)
        stories = []
        for _ in range(n):
            topic = [content[j] for j in rng.choice(len(content), self.topical_words, False)]
            stories.append((lsh_key(" ".join(topic)), topic))
        return stories

    def _payloads(self, idx: np.ndarray) -> list[dict[str, Any]]:
        fill = self._rng.integers(0, len(self._stop), size=(len(idx), self.filler_words))
        keep = self._rng.integers(0, self.topical_words, size=len(idx))
        out = []
        for row, i in enumerate(idx.tolist()):
            key, topic = self._domain[i]
            words = [w for j, w in enumerate(topic) if j != keep[row]]
            words += self._stop[fill[row]].tolist()
            out.append({"key": key, "text": " ".join(words)})
        return out


class TrafficGenerator(EventGenerator):
    app = "traffic"
    lines = 120
    vehicles = 900

    @property
    def default_keys(self) -> int:  # type: ignore[override]
        cols = round((DUBLIN_LON[1] - DUBLIN_LON[0]) / CELL_DEG)
        rows = round((DUBLIN_LAT[1] - DUBLIN_LAT[0]) / CELL_DEG)
        return cols * rows

    def _make_domain(self, n: int) -> list[tuple[float, float]]:
        cols = round((DUBLIN_LON[1] - DUBLIN_LON[0]) / CELL_DEG)
        cells = [(DUBLIN_LON[0] + (k % cols) * CELL_DEG,
                  DUBLIN_LAT[0] + (k // cols) * CELL_DEG) for k in range(n)]
        return cells

    def _payloads(self, idx: np.ndarray) -> list[dict[str, Any]]:
        m = len(idx)
        corner = np.array(self._domain, dtype=float)[idx]
        # Stay off the cell's edges so the key recomputed from the position is the cell.
        pos = corner + CELL_DEG * (0.1 + 0.8 * self._rng.random((m, 2)))
        jam = self._rng.random(m) < 0.1
        delay = np.where(jam, self._rng.normal(600, 120, m), self._rng.normal(30, 90, m))
        line = self._rng.integers(1, self.lines + 1, m)
        vehicle = self._rng.integers(33000, 33000 + self.vehicles, m)
        out = []
        for j in range(m):
            lon, lat = float(pos[j, 0]), float(pos[j, 1])
            out.append({
                "key": area_of(lon, lat, CELL_DEG), "line_id": str(line[j]),
                "vehicle_id": str(vehicle[j]), "lon": round(lon, 6), "lat": round(lat, 6),
                "delay_s": round(float(delay[j]), 1), "congestion": int(jam[j]),
            })
        return out


class ClicksGenerator(EventGenerator):
    app = "clicks"
    default_keys = 2000
    pages = 300

    def _make_domain(self, n: int) -> list[str]:
        words = english_words(400)[100:]
        rng = np.random.default_rng(self.seed + 2)
        self._urls = ["/"] + [
            "/" + "/".join(words[j] for j in rng.choice(len(words), 2, False))
            for _ in range(self.pages - 1)
        ]
        w = 1.0 / np.arange(1, self.pages + 1)
        self._url_cdf = np.cumsum(w) / w.sum()
        return [f"s{self.seed}-{i}" for i in range(n)]

    def _payloads(self, idx: np.ndarray) -> list[dict[str, Any]]:
        m = len(idx)
        url = np.minimum(np.searchsorted(self._url_cdf, self._rng.random(m)), self.pages - 1)
        status = np.where(self._rng.random(m) < 0.05, 404, 200)
        return [
            {"key": self._domain[i], "user": f"u{i}", "url": self._urls[u], "status": int(s)}
            for i, u, s in zip(idx.tolist(), url.tolist(), status.tolist(), strict=True)
        ]


GENERATORS: dict[str, type[EventGenerator]] = {
    g.app: g for g in (FsdGenerator, TrafficGenerator, ClicksGenerator, WordCountGenerator,
                       HeavyGenerator)
}


def make_generator(app: str, **params: Any) -> EventGenerator:
    try:
        cls = GENERATORS[app]
    except KeyError:
        raise WorkloadInputError(
            "app", f"unknown application {app!r}; known: {', '.join(sorted(GENERATORS))}"
        ) from None
    return cls(**params)

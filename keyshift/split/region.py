"""A discrete-time model of an ordered, stateless data-parallel region (blocking-rate §4).

One splitter thread sends tuples by weighted round-robin to N connections; each connection
has a bounded send buffer (TCP socket + receive queue) in front of its worker and a bounded
queue at the merger behind it. The merger releases tuples strictly in their original order,
so a fast connection's finished tuples wait for the slow one's (§4.1), its merge queue fills,
its worker stops, its send buffer fills: back pressure gates the region by its slowest member.

Quantities are fluid (tuples as real numbers) and advance in steps of ``dt``. The in-order
release is exact for piecewise-constant weights: every weight change opens a *segment* of the
tuple sequence in which connection c receives the fraction ``w_c``, so "how far along the
sequence has c finished everything it was sent" (its *reach*) is a piecewise-linear map of its
finished count, and the merger's frontier is the smallest reach. Within a step the frontier
is found first (the gating connection is never held back by its merge queue), then the merge
room bounds the workers and the workers bound the sends, so buffers far smaller than one
step's work still pass the full rate.

Blocked time is charged to one connection, the draft leader (§4.2). A new leader is the
connection that gates the merge (smallest reach): every full buffer upstream is waiting for it.
The leader keeps the blame while it is still held back by its own service (not by its merge
queue) and its send buffer is more than half full: while the splitter waits on it the others
clear, so with equal capacities the leader changes rarely and the others see no blocking.
Service rates jitter per step (seeded): runs are deterministic per seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from keyshift.split.errors import SplitInputError


def _inverse(w: np.ndarray) -> np.ndarray:
    """1 / w where w > 0, else 0 (callers mask those connections out)."""
    out = np.zeros_like(w)
    np.divide(1.0, w, out=out, where=w > 0)
    return out


@dataclass(frozen=True)
class Interval:
    """What one collection interval produced: tuples released, blocked seconds per connection."""

    elapsed: float
    released: float
    blocked: np.ndarray
    finished: bool

    @property
    def throughput(self) -> float:
        return self.released / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def blocking_rates(self) -> np.ndarray:
        """Blocked seconds per second of the interval, per connection (§3)."""
        return self.blocked / self.elapsed if self.elapsed > 0 else np.zeros_like(self.blocked)


class OrderedRegion:
    """Splitter → N workers → in-order merger, advanced interval by interval.

    ``service_rates`` are tuples/s per connection without slowdown; ``set_slowdown`` divides
    them (a 100× more expensive tuple is a slowdown of 100). Buffers are in tuples.
    """

    def __init__(
        self,
        service_rates: np.ndarray,
        splitter_rate: float,
        send_buffer: float,
        merge_buffer: float,
        dt: float = 0.1,
        jitter: float = 0.05,
        seed: int = 0,
    ) -> None:
        rates = np.asarray(service_rates, dtype=np.float64)
        if rates.ndim != 1 or rates.size < 1 or not np.isfinite(rates).all() or (rates <= 0).any():
            raise SplitInputError("service_rates", "must be positive numbers, one per connection")
        for name, value in (("splitter_rate", splitter_rate), ("send_buffer", send_buffer),
                            ("merge_buffer", merge_buffer), ("dt", dt)):
            if not value > 0:
                raise SplitInputError(name, "must be > 0")
        if not 0 <= jitter < 1:
            raise SplitInputError("jitter", "must be in [0, 1)")
        n = rates.size
        self.base_rates = rates
        self.slowdown = np.ones(n)
        self.splitter_rate = float(splitter_rate)
        self.send_buffer = float(send_buffer)
        self.merge_buffer = float(merge_buffer)
        self.dt = float(dt)
        self.jitter = float(jitter)
        self._rng = np.random.default_rng(seed)
        self.sent = np.zeros(n)
        self.done = np.zeros(n)
        self.total_sent = 0.0
        self.released = 0.0
        self.clock = 0.0
        self.leader = -1
        self._weights = np.full(n, 1.0 / n)
        self._seg_start = np.zeros(1)
        self._seg_base = np.zeros((1, n))
        self._seg_w = self._weights[None, :].copy()
        self._seg_inv = _inverse(self._seg_w)

    @property
    def connections(self) -> int:
        return int(self.base_rates.size)

    def set_slowdown(self, factors: np.ndarray) -> None:
        f = np.asarray(factors, dtype=np.float64)
        if f.shape != (self.connections,) or not np.isfinite(f).all() or (f <= 0).any():
            raise SplitInputError("slowdown", f"needs {self.connections} positive factors")
        self.slowdown = f

    def set_weights(self, weights: np.ndarray) -> None:
        """New split fractions from the next tuple on (integer units are normalised)."""
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.connections,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise SplitInputError("weights", f"needs {self.connections} non-negative values, not all 0")
        w = w / w.sum()
        self._weights = w
        if self.total_sent > self._seg_start[-1]:
            self._seg_start = np.append(self._seg_start, self.total_sent)
            self._seg_base = np.vstack([self._seg_base, self.sent[None, :]])
            self._seg_w = np.vstack([self._seg_w, w[None, :]])
            self._seg_inv = np.vstack([self._seg_inv, _inverse(w)[None, :]])
        else:
            self._seg_w[-1] = w
            self._seg_inv[-1] = _inverse(w)

    def _reach(self, done: np.ndarray, total: float) -> np.ndarray:
        """Per connection: how far along the sequence it has finished all its tuples."""
        starts = self._seg_start
        ahead = done - self._seg_base  # (K, N)
        if starts.size == 1:  # the common case: one weight vector since the frontier
            reach = np.where(self._seg_w[0] > 0, starts[0] + ahead[0] * self._seg_inv[0], np.inf)
            return np.minimum(np.maximum(reach, starts[0]), total)
        ends = np.append(starts[1:], total)[:, None]
        reach = np.where(self._seg_w > 0, starts[:, None] + ahead * self._seg_inv, np.inf)
        reach = np.minimum(np.maximum(reach, starts[:, None]), ends)
        reach = np.where(ahead >= -1e-9, reach, -np.inf)
        return reach.max(axis=0)

    def _sent_at(self, position: float) -> np.ndarray:
        """Tuples each connection had been sent when the sequence was at ``position``."""
        i = max(int(np.searchsorted(self._seg_start, position, side="right")) - 1, 0)
        return self._seg_base[i] + self._seg_w[i] * (position - self._seg_start[i])

    def _drop_released_segments(self) -> None:
        i = max(int(np.searchsorted(self._seg_start, self.released, side="right")) - 1, 0)
        if i:
            self._seg_start = self._seg_start[i:]
            self._seg_base = self._seg_base[i:]
            self._seg_w = self._seg_w[i:]
            self._seg_inv = self._seg_inv[i:]

    def run(self, duration: float, stop_at: float = np.inf) -> Interval:
        """Advance ``duration`` seconds, or until ``stop_at`` tuples have left the merger."""
        steps = max(1, int(round(duration / self.dt)))
        dt, x_max = self.dt, self.splitter_rate * self.dt
        B, Q = self.send_buffer, self.merge_buffer
        blocked = np.zeros(self.connections)
        start_released, elapsed = self.released, 0.0
        w = self._weights
        inv = _inverse(w)
        idle = w <= 0
        rng, n = self._rng, self.connections
        self._drop_released_segments()
        for _ in range(steps):
            cap = self.base_rates / self.slowdown * (1.0 + self.jitter * (2.0 * rng.random(n) - 1.0)) * dt
            want = max(0.0, min(x_max, stop_at - self.total_sent))
            # The connection that gates the merge is never held back by its merge queue, so
            # the frontier follows from service capacity and sends alone; the merge room it
            # leaves then bounds every worker, and the workers' progress bounds the sends.
            free = self.done + cap
            upper = float(self._reach(np.minimum(free, self.sent + w * want), self.total_sent + want).min())
            merge_cap = self._sent_at(max(upper, self.released)) + Q
            able = np.minimum(free, merge_cap)
            limit = np.maximum(able + B - self.sent, 0.0) * inv
            limit[idle] = np.inf
            x = max(0.0, min(want, float(limit.min())))
            sent = self.sent + w * x
            done = np.maximum(np.minimum(able, sent), self.done)
            reach = self._reach(done, self.total_sent + x)
            frontier = max(float(reach.min()), self.released)
            if x < x_max and want > 0:  # the splitter waited: blame the draft leader
                lead = self.leader
                if not (0 <= lead < n and not idle[lead] and merge_cap[lead] >= free[lead]
                        and done[lead] + B - sent[lead] < 0.5 * B):
                    lead = int(np.where(idle, np.inf, reach).argmin())
                self.leader = lead
                blocked[lead] += (1.0 - x / x_max) * dt
            self.sent, self.done = sent, done
            self.total_sent += x
            if frontier >= stop_at - 1e-9 * max(1.0, stop_at):
                gained = frontier - self.released
                part = (stop_at - self.released) / gained if gained > 0 else 1.0
                elapsed += dt * part
                self.clock += dt * part
                self.released = float(stop_at)
                return Interval(elapsed, self.released - start_released, blocked, True)
            self.released = frontier
            elapsed += dt
            self.clock += dt
        return Interval(elapsed, self.released - start_released, blocked, False)

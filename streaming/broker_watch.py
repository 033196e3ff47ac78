"""Say when a running job is waiting for its Kafka broker, and when the broker is back.

A stopped broker does not fail a Structured Streaming query: the Kafka source's consumer
retries, the batch in flight waits, and nothing is lost (the offsets of the next batch are
fixed only once the broker answers). What a person watching ``keyshift run`` saw meanwhile
was Kafka's own WARN line about a node that "may not be available", once a second, or
nothing at all with Spark's logs quiet. So a small thread probes the bootstrap address (a
TCP connect, which works the same with SASL or TLS listeners) and prints one line when the
broker has been unreachable for ``after_s`` seconds and one when it answers again.

Whether a resumed run may read its topic on is ``source_resume.py``'s (kept apart: this
module is what ``broker.py`` uses, and the resume check asks ``broker.py`` for offsets).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

from keyshift.lakehouse.logs import say as say_line

log = logging.getLogger(__name__)


def _servers(bootstrap: str) -> list[tuple[str, str]]:
    """The (host, port) of each bootstrap server, as written (the port may not be a number)."""
    return [(host or "127.0.0.1", port) for host, _, port in
            (s.strip().rpartition(":") for s in bootstrap.split(",") if s.strip())]


def _connect(host: str, port: str, timeout_s: float) -> str:
    """One TCP connect: "open", "refused" (nothing listens), or "unknown" (no number, no
    answer in time, no such host)."""
    if not port.isdigit():
        return "unknown"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "unknown"


def reachable(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """Whether any of the bootstrap servers accepts a TCP connection."""
    return any(_connect(host, port, timeout_s) == "open" for host, port in _servers(bootstrap))


def nobody_listens(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """Whether every bootstrap server refuses a TCP connection outright (nothing listens on
    its port). A Kafka client learns no more than that by waiting its whole bootstrap
    timeout, so callers give up at once; a server that does not answer at all (a dropped
    SYN, an unknown host) is left to the client's own timeout."""
    servers = _servers(bootstrap)
    return bool(servers) and all(_connect(host, port, timeout_s) == "refused"
                                 for host, port in servers)


class BrokerWatch:
    """Probes ``bootstrap`` every ``every_s`` seconds on a daemon thread until :meth:`stop`."""

    def __init__(self, bootstrap: str, after_s: float = 10.0, every_s: float = 2.0,
                 say: Callable[[str], None] = say_line,
                 probe: Callable[[str], bool] = reachable,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self.after_s = after_s
        self.every_s = every_s
        self.say = say
        self.probe = probe
        self.clock = clock
        self.down_since: float | None = None  # when the first failed probe of this outage ran
        self.said = False  # whether the outage was announced
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> None:
        """One probe: announce an outage once it is ``after_s`` old, and its end."""
        now = self.clock()
        if self.probe(self.bootstrap):
            if self.said and self.down_since is not None:
                self.say(f"keyshift: the Kafka broker at {self.bootstrap} is back after "
                         f"{now - self.down_since:.0f} s; the job goes on where it was")
            self.down_since, self.said = None, False
            return
        if self.down_since is None:
            self.down_since = now
        if not self.said and now - self.down_since >= self.after_s:
            self.said = True
            self.say(f"keyshift: waiting for the Kafka broker at {self.bootstrap} (unreachable "
                     f"for {now - self.down_since:.0f} s); the job resumes when it is back, "
                     "and nothing is lost meanwhile")

    def start(self) -> BrokerWatch:
        def loop() -> None:
            while not self._stop.wait(self.every_s):
                self.check()

        self._thread = threading.Thread(target=loop, name="keyshift-broker-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.every_s + 5)

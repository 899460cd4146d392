"""HTTP connection limits: what one server holds at most (`HttpLimits`) and the accounting that enforces
them under slow clients and floods (`ConnectionGuard`)."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP server holds at most, and how long it waits for a client."""

    header_timeout_s: float = 10.0      # from connect (or the end of the last response) to a complete request head
    body_timeout_s: float = 30.0        # from the request head to the end of its body
    keep_alive_s: float = 5.0           # idle keep-alive connection
    max_connections: int | None = None  # open connections in total (None: the fd limit less a reserve)
    max_per_client: int | None = None   # from one client address (a unix socket is one client; None: the total)
    timeouts_per_s: int = 500           # header timeouts closed per second at most (no reconnect storm)
    max_body_bytes: int = 16 * 2**20    # request body
    max_header_bytes: int = 16 * 2**10  # request line + headers
    backlog: int = 4096                 # kernel accept queue (the kernel caps it at net.core.somaxconn)
    accept_batch: int = 64              # connections accepted per event-loop turn (see Acceptor)
    evictions_per_s: int = 250          # at the cap: new connections without a whole request head that may
                                        # close a waiting one, per second (accept, transport, protocol and
                                        # the closing: ~0.4 ms of CPU each here, from a py-spy profile)
    accepts_at_cap_per_s: int = 5000    # at the cap: accepts per second (one shed at accept builds nothing)
    log_every_s: float = 10.0           # the guard's closings are counted and summed up in one line this often
    full_gc_every_s: float = 60.0       # full garbage collections (see serve_http), from the sweeper


EVICT_GRACE_S = 0.5


class ConnectionGuard:
    """Connection accounting for the guarded HTTP protocol.

    A connection is *waiting* while it has not delivered a complete request head (just accepted, or idle
    after a response) and *busy* while a request runs. Waiting ones are closed after `header_timeout_s`
    however slowly they trickle bytes; a request whose body is not complete `body_timeout_s` after its
    head gets 408 and is closed. When a new connection would pass the per-client or the total cap, the
    oldest waiting connection (of that client, or of anyone) is closed to make room; only when every
    connection in the way is busy is the new one refused. So a flood of half-open connections can
    neither exhaust file descriptors nor lock out a client that sends a whole request at once."""

    def __init__(self, limits: HttpLimits, log: logging.Logger | None = None):
        total = limits.max_connections or default_max_connections()
        limits = replace(limits, max_connections=total, max_per_client=min(limits.max_per_client or total, total))
        self.limits = limits
        self.log = log or logging.getLogger("egg_mcp.http")
        self.waiting: OrderedDict = OrderedDict()          # proto -> monotonic time it started waiting
        self.waiting_by_client: dict = {}                  # client -> OrderedDict(proto -> None)
        self.busy: dict = {}                               # proto -> monotonic time its head arrived
        self.per_client: dict = {}                         # client -> open count
        self.open = 0
        self.stats = {"accepted": 0, "refused": 0, "evicted": 0, "shed": 0, "header_timeouts": 0, "body_timeouts": 0}
        self._logged = dict(self.stats)
        self._tokens, self._refilled = max(1.0, limits.evictions_per_s / 10), time.monotonic()
        self._accept_tokens, self._accept_refilled = max(1.0, limits.accepts_at_cap_per_s / 20), time.monotonic()
        self._last_full_gc = time.monotonic()
        self._last_log = time.monotonic()
        self._sweeper: asyncio.Task | None = None

    # state changes -------------------------------------------------------------------------------
    def _unwait(self, proto) -> None:
        if self.waiting.pop(proto, None) is not None:
            bucket = self.waiting_by_client.get(proto._egg_client)
            if bucket is not None:
                bucket.pop(proto, None)
                if not bucket:
                    del self.waiting_by_client[proto._egg_client]

    def _wait(self, proto) -> None:
        self.busy.pop(proto, None)
        self._unwait(proto)
        self.waiting[proto] = time.monotonic()
        self.waiting_by_client.setdefault(proto._egg_client, OrderedDict())[proto] = None

    def admit(self, proto) -> bool:
        """A new connection: True to keep it (after making room), False when it was refused."""
        self._ensure_sweeper()
        client = proto._egg_client
        lim = self.limits
        assert lim.max_connections is not None  # resolved in __init__
        while self.per_client.get(client, 0) >= lim.max_per_client:
            if not self._evict(self.waiting_by_client.get(client)):
                return self._refuse(proto, f"client {client} already has {lim.max_per_client} busy connections")
        while self.open >= lim.max_connections:
            if not self._evict(self.waiting):
                return self._refuse(proto, f"{lim.max_connections} busy connections open")
        self.open += 1
        self.per_client[client] = self.per_client.get(client, 0) + 1
        proto._egg_counted = True
        self.stats["accepted"] += 1
        self._wait(proto)
        return True

    def head_received(self, proto) -> None:
        if proto._egg_counted:
            self._unwait(proto)
            self.busy[proto] = time.monotonic()

    def response_done(self, proto) -> None:
        if proto._egg_counted and not proto._egg_closing:
            self._wait(proto)

    def forget(self, proto) -> None:
        if not getattr(proto, "_egg_counted", False):
            return
        proto._egg_counted = False
        self._unwait(proto)
        self.busy.pop(proto, None)
        self.open -= 1
        client = proto._egg_client
        left = self.per_client.get(client, 1) - 1
        if left:
            self.per_client[client] = left
        else:
            self.per_client.pop(client, None)

    # closing ---------------------------------------------------------------------------------------
    def _refuse(self, proto, why: str) -> bool:
        self.stats["refused"] += 1
        self._last_refusal = why
        proto._egg_closing = True
        proto.transport.abort()
        return False

    def _evict(self, bucket) -> bool:
        """Close the oldest waiting connection of `bucket`, unless even that one arrived within
        EVICT_GRACE_S and sent nothing yet (its request head may be unread in the socket buffer while
        the loop accepts a burst: a client that sends its head at once is never the one closed)."""
        if not self._evictable(bucket):
            return False
        proto = next(iter(bucket))
        self.stats["evicted"] += 1
        self._tokens -= 1.0
        self._close(proto)
        return True

    def _close(self, proto) -> None:
        proto._egg_closing = True
        self.forget(proto)  # counted out now: the transport reports connection_lost on a later turn
        proto.transport.abort()

    def sweep(self) -> None:
        now = time.monotonic()
        lim = self.limits
        budget = max(1, int(lim.timeouts_per_s * self._sweep_period()))
        while self.waiting and budget > 0:
            budget -= 1
            proto, since = next(iter(self.waiting.items()))
            if now - since < lim.header_timeout_s:
                break
            self.stats["header_timeouts"] += 1
            self._close(proto)
        for proto, since in list(self.busy.items()):
            if now - since >= lim.body_timeout_s and proto._egg_body_pending():
                self.stats["body_timeouts"] += 1
                proto._egg_closing = True
                self.forget(proto)
                proto._egg_timeout_body()

    def at_cap(self) -> bool:
        assert self.limits.max_connections is not None  # resolved in __init__
        return self.open >= self.limits.max_connections

    def eviction_allowed(self) -> bool:
        """At the cap, whether a new connection without a whole request head may close a waiting one now:
        those closings are paced at `evictions_per_s` (a flood larger than the cap, each new connection
        closing an old one that reconnects at once, would otherwise keep the server busy with nothing else)."""
        rate = float(self.limits.evictions_per_s)
        now = time.monotonic()
        self._tokens = min(max(1.0, rate / 10), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        return self._tokens >= 1.0

    def accept_delay(self) -> float:
        """Seconds to leave the listening socket alone before the next accept: 0 below the cap; at the cap,
        accepts are paced at `accepts_at_cap_per_s` (a connection shed at accept reconnects at once: unpaced,
        that loop alone would take the CPU; paced, the rest waits in the kernel's queue, nothing dropped)."""
        if not self.at_cap():
            return 0.0
        rate = float(self.limits.accepts_at_cap_per_s)
        now = time.monotonic()
        self._accept_tokens = min(max(1.0, rate / 20), self._accept_tokens + (now - self._accept_refilled) * rate)
        self._accept_refilled = now
        if self._accept_tokens >= 1.0:
            self._accept_tokens -= 1.0
            return 0.0
        return (1.0 - self._accept_tokens) / rate

    def full(self) -> bool:
        """At the cap with no waiting connection old enough to close: a new one would be refused."""
        assert self.limits.max_connections is not None  # resolved in __init__
        return self.open >= self.limits.max_connections and not self._evictable(self.waiting)

    def _evictable(self, bucket) -> bool:
        if not bucket:
            return False
        proto = next(iter(bucket))
        return proto._egg_seen_data or time.monotonic() - self.waiting.get(proto, 0.0) >= EVICT_GRACE_S

    def log_summary(self, force: bool = False) -> str | None:
        """One warning line for everything the guard closed or refused since the last one, at most every
        `log_every_s` (a per-connection line costs more CPU than the closing itself under a flood, even when
        a log filter drops it: 5 % of the server's CPU under the flood in a py-spy profile)."""
        now = time.monotonic()
        if not force and now - self._last_log < self.limits.log_every_s:
            return None
        delta = {k: v - self._logged[k] for k, v in self.stats.items() if k != "accepted"}
        window = now - self._last_log
        self._logged, self._last_log = dict(self.stats), now
        if not any(delta.values()):
            return None
        lim = self.limits
        parts = []
        if delta["evicted"]:
            parts.append(f"{delta['evicted']} connections still waiting for a request closed to make room "
                         f"(cap {lim.max_connections} in total, {lim.max_per_client} per client)")
        if delta["header_timeouts"]:
            parts.append(f"{delta['header_timeouts']} closed without a complete request head within "
                         f"{lim.header_timeout_s:g} s")
        if delta["body_timeouts"]:
            parts.append(f"{delta['body_timeouts']} requests answered 408 (body not complete within "
                         f"{lim.body_timeout_s:g} s)")
        if delta["shed"]:
            parts.append(f"{delta['shed']} new connections without a whole request head closed at accept "
                         f"(cap reached, closings of waiting ones paced at {lim.evictions_per_s}/s)")
        if delta["refused"]:
            parts.append(f"{delta['refused']} connections refused ({getattr(self, '_last_refusal', '')})")
        line = f"HTTP limits in the last {window:.0f} s: " + "; ".join(parts) + f"; {self.open} open now"
        self.log.warning("%s", line)
        return line

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def _sweep_period(self) -> float:
        return max(0.05, min(0.25, self.limits.header_timeout_s / 4, self.limits.body_timeout_s / 4))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_period())
            try:
                self.sweep()
                self.log_summary()
                if time.monotonic() - self._last_full_gc >= self.limits.full_gc_every_s:
                    self._last_full_gc = time.monotonic()
                    gc.collect()
            except Exception:  # pragma: no cover - keep guarding whatever one connection did
                self.log.exception("HTTP connection sweep failed")


FD_RESERVE = 256
"""File descriptors kept for everything but client connections (workspace, workers, pipes)."""


def default_max_connections() -> int:
    import resource

    return max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - FD_RESERVE)

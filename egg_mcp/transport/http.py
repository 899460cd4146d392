"""Serving over HTTP: uvicorn with the guarded protocol, listeners, the log rate limit and the limits banner."""

from __future__ import annotations

import gc
import logging
import os
import socket
import time

from egg_mcp.transport.acceptor import Acceptor
from egg_mcp.transport.connection_guard import ConnectionGuard, HttpLimits


def guarded_protocol(guard: ConnectionGuard):
    """uvicorn's h11 protocol with the guard's accounting (header/body timeouts, connection caps)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _egg_counted = False
        _egg_closing = False
        _egg_client = None
        _egg_seen_data = False

        def data_received(self, data):
            self._egg_seen_data = True
            super().data_received(data)

        def connection_made(self, transport):  # type: ignore[override]
            super().connection_made(transport)
            self._egg_client = self.client[0] if self.client else "local"
            guard.admit(self)

        def connection_lost(self, exc):
            guard.forget(self)
            super().connection_lost(exc)
            # asyncio's socket transport keeps a bound method of itself (`_read_ready_cb`, CPython 3.11):
            # a reference cycle, so every closed connection stayed in memory until a full garbage
            # collection. Cut, it is freed at once.
            if getattr(self.transport, "_read_ready_cb", None) is not None:
                self.transport._read_ready_cb = None  # pyright: ignore[reportAttributeAccessIssue]  # (private)

        def handle_events(self):
            before = self.cycle
            super().handle_events()
            if self.cycle is not before and self.cycle is not None and not self.cycle.response_complete:
                guard.head_received(self)

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                guard.response_done(self)

        def _egg_body_pending(self) -> bool:
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete and cycle.more_body

        def _egg_timeout_body(self) -> None:
            cycle = self.cycle
            if cycle is not None and not cycle.response_started:
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                                     b"content-length: 30\r\nconnection: close\r\n\r\nrequest body not sent in time\n")
            self.transport.close()

    return GuardedH11Protocol


class RateLimitedLogFilter(logging.Filter):
    """At most `burst` records per (logger, message template) and then one per `per_s` seconds; the
    next record that passes says how many like it were dropped. Bounds the log under a flood of bad
    requests (a few KB per minute per kind of message instead of one line per request)."""

    def __init__(self, burst: int = 10, per_s: float = 10.0, clock=time.monotonic):
        super().__init__()
        self.burst, self.per_s, self.clock = burst, per_s, clock
        self.state: dict = {}  # key -> [tokens, last refill, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = self.clock()
        st = self.state.get(key)
        if st is None:
            if len(self.state) > 10_000:
                self.state.clear()
            st = self.state[key] = [float(self.burst), now, 0]
        st[0] = min(float(self.burst), st[0] + (now - st[1]) / self.per_s)
        st[1] = now
        if st[0] < 1.0:
            st[2] += 1
            return False
        st[0] -= 1.0
        if st[2]:
            record.msg = f"{record.msg} [{st[2]} similar messages suppressed]"
            st[2] = 0
        return True


def install_log_rate_limit(logger: logging.Logger | None = None, **kw) -> RateLimitedLogFilter:
    """Put one rate limit on every handler of `logger` (default: the root logger, where the server's,
    uvicorn's and the SDK's records all end up)."""
    flt = RateLimitedLogFilter(**kw)
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(flt)
    return flt


def unix_listener(path: str, backlog: int) -> socket.socket:
    """A unix stream socket at `path` created with mode 0600 (umask while binding: no window in which
    another user could connect)."""
    import stat as _stat

    if os.path.exists(path):
        if not _stat.S_ISSOCK(os.stat(path).st_mode):
            raise OSError(f"{path} exists and is not a socket")
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def tcp_listener(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (held connections are file descriptors)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _somaxconn() -> int | None:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def limits_banner(guard: ConnectionGuard, fd_before: tuple[int, int], fd_soft: int) -> str:
    """The line `serve --http` logs at start: what it holds at most and how long it waits."""
    lim = guard.limits
    cap = _somaxconn()
    backlog = f"{min(lim.backlog, cap)} (asked {lim.backlog}, net.core.somaxconn {cap})" if cap else f"{lim.backlog}"
    raised = f"raised from soft {fd_before[0]}" if fd_soft > fd_before[0] else "soft limit, not raised"
    return (f"HTTP limits: file descriptors {fd_soft} ({raised}; hard {fd_before[1]}); connections "
            f"{lim.max_connections} in total, {lim.max_per_client} per client; request head within "
            f"{lim.header_timeout_s:g} s, body within {lim.body_timeout_s:g} s; body <= {lim.max_body_bytes} B; "
            f"listen backlog {backlog}; {lim.accept_batch} accepts per event-loop turn; at the cap "
            f"{lim.accepts_at_cap_per_s} accepts/s, a whole request head always taken, "
            f"{lim.evictions_per_s}/s waiting connections closed for new ones without")


def serve_http(app, sock: socket.socket, limits: HttpLimits) -> None:
    """Run `app` on the listening socket `sock` with the guarded protocol and `limits`.

    asyncio accepts up to `backlog` connections per turn of the event loop (the number uvicorn hands to
    `loop.create_server` serves both as the listen queue and as that batch). Under a connection flood a
    batch of 2048 accepts, each with its transport, protocol and the closing of an older connection, made
    one loop turn take most of a second, and an authenticated request needs a few dozen turns: seconds. So
    the `Acceptor` takes the socket instead: `accept_batch` per turn (requests in progress advance between
    batches), paced at the cap, while the kernel queue keeps its full `backlog` (a burst of connects waits
    there instead of being dropped, which would cost the client a SYN retransmit: 1 s, then 3 s, 7 s)."""
    import resource

    import uvicorn

    fd_before = resource.getrlimit(resource.RLIMIT_NOFILE)
    fd_soft = raise_fd_limit()
    guard = ConnectionGuard(limits)
    logging.getLogger("egg_mcp.http").info("%s", limits_banner(guard, fd_before, fd_soft))
    config = uvicorn.Config(
        app, http=guarded_protocol(guard), ws="none", lifespan="auto", log_config=None, access_log=False,
        log_level="warning", timeout_keep_alive=max(1, int(limits.keep_alive_s)), backlog=limits.backlog,
        h11_max_incomplete_event_size=limits.max_header_bytes)

    class Server(uvicorn.Server):
        acceptor: Acceptor | None = None

        async def startup(self, sockets=None):
            await super().startup(sockets=[])  # uvicorn's own listeners: none, the Acceptor takes `sock`
            if self.should_exit:
                return

            def factory():
                # (uvicorn types http_protocol_class as asyncio.Protocol; its HTTP protocols take these)
                return config.http_protocol_class(config=config, server_state=self.server_state,  # pyright: ignore[reportCallIssue]
                                                  app_state=self.lifespan.state)  # pyright: ignore[reportCallIssue]

            self.acceptor = Acceptor(sock, factory, guard, logging.getLogger("egg_mcp.http"))
            self.acceptor.start()

        async def shutdown(self, sockets=None):
            if self.acceptor is not None:
                self.acceptor.close()
            sock.close()
            await super().shutdown(sockets=[])

    # Garbage collection: a full collection goes through every live object and stops the loop meanwhile;
    # 20,000 held connections are about 400,000 objects (passes of 0.6-1.3 s measured on the shared 2-core
    # machine), and CPython starts one whenever a quarter more objects have survived since the last: 14
    # in 30 s under the flood, each finding nothing once closed connections are freed by reference
    # counting (see connection_lost). So what exists
    # now (the app, its schemas, the SDK: about 100,000 objects) is frozen out of every collection, the
    # automatic full collections are off, and the sweeper runs one every `full_gc_every_s` (young
    # garbage, where request-scoped cycles are, is still collected by the generation 0 and 1 passes).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*gc.get_threshold()[:2], 2**31 - 1)
    Server(config).run(sockets=[])

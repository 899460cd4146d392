"""HTTP: accepting connections in paced batches instead of asyncio's own accept loop."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict

from egg_mcp.transport.connection_guard import ConnectionGuard


class Acceptor:
    """Accepts on the listening socket for uvicorn, in place of asyncio's own loop (which takes up to
    `backlog` connections, 2048 here, in one event-loop turn and has no way to pause): at most
    `accept_batch` per turn, so requests in progress advance between batches. Below the cap every
    connection is taken. At the cap (a flood holds it), accepts are paced (`accept_delay`) and each new
    connection is looked at before anything is built for it (MSG_PEEK, nothing consumed):
      - a whole request head is there: taken (it closes the oldest waiting connection): a client that
        sends its request at once is served however many slow ones hold the cap;
      - part of a head: taken only when a closing is allowed (`eviction_allowed`), else closed at once;
      - nothing yet: parked (at most `accept_batch`, for up to PARK_S) until its first bytes say which;
      - a connection that could only be refused (cap reached, nothing evictable) is closed at once."""

    PARK_S = 0.5

    def __init__(self, sock: socket.socket, factory, guard: ConnectionGuard, log: logging.Logger):
        self.sock, self.factory, self.guard, self.log = sock, factory, guard, log
        self.loop = asyncio.get_running_loop()
        self.fd = sock.fileno()
        self.reading = False
        self.resume: asyncio.TimerHandle | None = None
        self.closed = False
        self.resource_errors = 0
        self.parked: OrderedDict = OrderedDict()  # socket -> deadline
        self.recheck: asyncio.TimerHandle | None = None
        self.peek_bytes = guard.limits.max_header_bytes
        sock.setblocking(False)

    def start(self) -> None:
        if not self.reading and not self.closed:
            self.resume = None
            self.loop.add_reader(self.fd, self._ready)
            self.reading = True

    def _pause(self, seconds: float) -> None:
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False
        if self.resume is None and not self.closed:
            self.resume = self.loop.call_later(seconds, self.start)

    def close(self) -> None:
        self.closed = True
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False
        for handle in (self.resume, self.recheck):
            if handle is not None:
                handle.cancel()
        self.resume = self.recheck = None
        for conn in list(self.parked):
            self._unpark(conn)
            conn.close()

    def _head(self, conn: socket.socket) -> str:
        try:
            data = conn.recv(self.peek_bytes, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return "nothing"
        except OSError:
            return "gone"
        if not data:
            return "gone"
        return "whole" if b"\r\n\r\n" in data else "part"

    def _shed(self, conn: socket.socket) -> None:
        self.guard.stats["shed"] += 1
        conn.close()

    def _park(self, conn: socket.socket) -> None:
        """Hold a connection that has sent nothing yet until its first bytes arrive (a reader on it), for
        PARK_S at most; when `accept_batch` are parked already the oldest one is shed."""
        if len(self.parked) >= self.guard.limits.accept_batch:
            oldest = next(iter(self.parked))
            self._unpark(oldest)
            self._shed(oldest)
        self.parked[conn] = time.monotonic() + self.PARK_S
        self.loop.add_reader(conn.fileno(), self._parked_ready, conn)
        if self.recheck is None:
            self.recheck = self.loop.call_later(self.PARK_S / 5, self._expire_parked)

    def _unpark(self, conn: socket.socket) -> None:
        if self.parked.pop(conn, None) is not None:
            self.loop.remove_reader(conn.fileno())

    def _parked_ready(self, conn: socket.socket) -> None:
        self._unpark(conn)
        head = self._head(conn)
        if head == "whole" or not self.guard.at_cap() or (head == "part" and self.guard.eviction_allowed()):
            self._take(conn)
        else:
            self._shed(conn)

    def _expire_parked(self) -> None:
        self.recheck = None
        now = time.monotonic()
        for conn, deadline in list(self.parked.items()):
            if now < deadline:
                break  # in arrival order: the rest are younger
            self._unpark(conn)
            self._shed(conn)
        if self.parked and not self.closed:
            self.recheck = self.loop.call_later(self.PARK_S / 5, self._expire_parked)

    def _ready(self) -> None:
        guard = self.guard
        for _ in range(guard.limits.accept_batch):
            delay = guard.accept_delay()
            if delay > 0:
                self._pause(max(delay, 0.002))
                return
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # out of descriptors or memory: leave the queue to the kernel a moment
                self.resource_errors += 1
                if self.resource_errors == 1 or self.resource_errors % 1000 == 0:
                    self.log.warning("HTTP accept failed (%s), %d times so far: pausing accepts 0.1 s",
                                     exc, self.resource_errors)
                self._pause(0.1)
                return
            conn.setblocking(False)
            if guard.full():
                guard.stats["refused"] += 1
                guard._last_refusal = f"{guard.limits.max_connections} busy connections open"
                conn.close()
                continue
            if guard.at_cap() and not guard.eviction_allowed():
                head = self._head(conn)
                if head == "nothing":
                    self._park(conn)
                    continue
                if head != "whole":
                    self._shed(conn)
                    continue
            self._take(conn)

    def _take(self, conn: socket.socket) -> None:
        self.loop.create_task(self._connect(conn))

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn)
        except OSError:
            conn.close()

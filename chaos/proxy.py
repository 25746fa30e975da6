"""Loopback TCP proxies, one per client-to-master link, for network faults.

Each chaos client reaches each master through its own :class:`Link`: a listener on a free
127.0.0.1 port that forwards to the master. Because every link is separate, a scenario can
cut client 1 off from masters D and E while client 2 still reaches them (the partitions of
K3/K4 of docs/safety.md), or slow down one link only. Controls, all callable from any thread
other than the proxy loop's own, and effective when they return:

``set_latency(to_server=, to_client=)``
    Every chunk of bytes is delivered that many seconds after it arrived, per direction.
    Chunks keep their order; a change applies to bytes that arrive after it.
``blackhole()`` / ``heal()``
    The link stops forwarding: the proxy still accepts connections (the client's connect
    succeeds, as with a hung node) but does not reach the master for them, and existing
    connections stall in both directions. Bytes that arrive meanwhile are held, as TCP
    would keep retransmitting them, and are delivered on ``heal()``: a request the client
    gave up on may still land late, which is exactly why Redlock unlocks on every master
    after a failed attempt. ``heal(reset=True)`` instead drops the held bytes by resetting
    the stalled connections, as when TCP gives up during a long partition.
``close_all()``
    Reset (RST) every current connection; the listener stays open.
``forget_all()``
    Silently drop every current connection, as a NAT gateway or load balancer does when it
    forgets an idle flow: from then on, their bytes are discarded in both directions, with
    no FIN and no RST to either side; new connections are forwarded as usual.
``set_tap(callback)``
    ``callback(to_server, data)`` sees each chunk as it is delivered (after any latency
    or blackhole), on the proxy loop's thread, so it must be quick: for instance, SIGSTOP a
    client process the moment its ``SET ... NX`` reaches a master (K5 of docs/safety.md). A
    command may be split across chunks; Redis commands of a lock are small and rarely are.

All links of a run share one :class:`ProxyLoop`: an asyncio loop in one daemon thread of the
harness process. ``ProxyLoop.close()`` (or leaving its ``with`` block) closes every socket
and joins the thread, so no ResourceWarning survives a test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["HOST", "Link", "LinkStats", "ProxyLoop"]

HOST = "127.0.0.1"

_CHUNK = 65536
# How long a control call waits for the loop thread before calling it wedged.
_CONTROL_TIMEOUT = 10.0

_T = TypeVar("_T")


@dataclass(frozen=True)
class LinkStats:
    """Counters of one link since it was made."""

    accepted: int  # client connections accepted
    connected: int  # of them, connected to the target
    refused: int  # of them, whose connection to the target failed
    to_server: int  # bytes delivered to the target
    to_client: int  # bytes delivered back to clients
    open: int  # connections open now


class _EOF:
    """Queued after the last chunk of a direction."""


_END = _EOF()


class _Connection:
    """One client connection and, once made, its connection to the target."""

    def __init__(self, link: Link, client: asyncio.StreamWriter) -> None:
        self.link = link
        self.client = client
        self.server: asyncio.StreamWriter | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        #: Forgotten by the middlebox: bytes in either direction vanish.
        self.forgotten = False

    def abort(self, *, reset: bool) -> None:
        for writer in (self.client, self.server):
            if writer is None:
                continue
            if reset:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    # Linger 0: close() sends RST instead of FIN, as a crashed peer would.
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    """Close gracefully (flushing what was written), but never wait long for a peer that
    does not read: then abort."""
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), timeout=1.0)
    except (OSError, TimeoutError):
        writer.transport.abort()


class Link:
    """One proxied link: listens on ``HOST:port`` and forwards to ``target``.

    Made by :meth:`ProxyLoop.link`; see the module docstring for what the controls do.
    """

    def __init__(self, loop: ProxyLoop, target: tuple[str, int], name: str) -> None:
        self._loop = loop
        self.target = target
        self.name = name
        self.host = HOST
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        # Set means forwarding; cleared while blackholed. Only touched on the loop thread.
        self._flowing: asyncio.Event | None = None
        # Plain floats read by the loop thread; a float store is atomic under the GIL.
        self._to_server_delay = 0.0
        self._to_client_delay = 0.0
        self._blackholed = False
        self._tap: Callable[[bool, bytes], object] | None = None
        #: Exceptions the tap raised (each is swallowed so that forwarding goes on).
        self.tap_errors: list[BaseException] = []
        self._accepted = self._connected = self._refused = 0
        self._bytes_to_server = self._bytes_to_client = 0

    def __repr__(self) -> str:
        state = "blackholed" if self._blackholed else "open"
        return f"<Link {self.name} {self.host}:{self.port} -> {self.target[0]}:{self.target[1]} {state}>"

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect instead of the target."""
        return (self.host, self.port)

    @property
    def url(self) -> str:
        """A ``redis://`` URL for this link."""
        return f"redis://{self.host}:{self.port}"

    @property
    def blackholed(self) -> bool:
        return self._blackholed

    @property
    def latency(self) -> tuple[float, float]:
        """(to_server, to_client) added delays in seconds."""
        return (self._to_server_delay, self._to_client_delay)

    @property
    def stats(self) -> LinkStats:
        return LinkStats(
            accepted=self._accepted,
            connected=self._connected,
            refused=self._refused,
            to_server=self._bytes_to_server,
            to_client=self._bytes_to_client,
            open=len(self._connections),
        )

    # -- controls (any thread but the loop's) --

    def set_tap(self, tap: Callable[[bool, bytes], object] | None) -> None:
        """Call ``tap(to_server, data)`` for each chunk delivered; None removes it."""
        self._tap = tap

    def set_latency(self, to_server: float = 0.0, to_client: float = 0.0) -> None:
        """Delay each direction by this many seconds (0 for none)."""
        if to_server < 0 or to_client < 0:
            raise ValueError(f"latency must be >= 0, not {to_server!r}/{to_client!r}")
        self._to_server_delay = float(to_server)
        self._to_client_delay = float(to_client)

    def blackhole(self) -> None:
        """Stop forwarding, in both directions, on existing and new connections."""
        self._loop.call(self._set_flowing(False))

    def heal(self, *, reset: bool = False) -> None:
        """Forward again: deliver what was held, or with ``reset`` drop it with the
        connections that held it."""
        if reset:
            self.close_all()
        self._loop.call(self._set_flowing(True))

    def close_all(self) -> int:
        """Reset every current connection; returns how many there were."""
        return self._loop.call(self._close_all(reset=True))

    def forget_all(self) -> int:
        """Silently drop every current connection; returns how many there were."""
        return self._loop.call(self._forget_all())

    def close(self) -> None:
        """Stop listening and close every connection; idempotent."""
        self._loop.call(self._close())

    # -- on the loop thread --

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        self._blackholed = not flowing
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _close_all(self, *, reset: bool) -> int:
        connections = list(self._connections)
        for connection in connections:
            connection.abort(reset=reset)
        tasks = [t for c in connections for t in c.tasks if t is not asyncio.current_task()]
        # Let every handler see its cancellation and unwind before we report done.
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(connections)

    async def _forget_all(self) -> int:
        for connection in self._connections:
            connection.forgotten = True
        return len(self._connections)

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        await self._close_all(reset=False)
        if server is not None:
            await server.wait_closed()
        self._loop._forget(self)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        connection = _Connection(self, client_writer)
        task = asyncio.current_task()
        assert task is not None
        assert self._flowing is not None
        connection.tasks.add(task)
        self._connections.add(connection)
        self._accepted += 1
        try:
            # A blackholed link accepts (the kernel already has) but does not go on to the
            # master: to the client it looks like a node that hangs after connect.
            await self._flowing.wait()
            try:
                server_reader, server_writer = await asyncio.open_connection(*self.target)
            except OSError:
                # The target is down (killed master): the client sees its connection closed.
                self._refused += 1
                return
            connection.server = server_writer
            self._connected += 1
            pumps = [
                asyncio.create_task(self._pump(connection, client_reader, server_writer, to_server=True)),
                asyncio.create_task(self._pump(connection, server_reader, client_writer, to_server=False)),
            ]
            connection.tasks.update(pumps)
            # When either direction ends, the connection is over: Redis has no use for a
            # half-closed one.
            _done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in pending:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        except asyncio.CancelledError:
            pass  # close_all() or shutdown: the finally below tidies up
        finally:
            self._connections.discard(connection)
            others = [t for t in connection.tasks if t is not task]
            for other in others:
                other.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            for writer in (client_writer, connection.server):
                if writer is not None:
                    await _close_writer(writer)

    async def _pump(
        self, connection: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_server: bool
    ) -> None:
        """Copy one direction: a reader task stamps each chunk with its delivery time, and
        this task delivers chunks in order once that time has come and the link flows."""
        assert self._flowing is not None
        queue: asyncio.Queue[tuple[float, bytes | _EOF]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def read() -> None:
            while True:
                try:
                    data = await reader.read(_CHUNK)
                except OSError:
                    data = b""
                delay = self._to_server_delay if to_server else self._to_client_delay
                queue.put_nowait((loop.time() + delay, data or _END))
                if not data:
                    return

        reading = asyncio.create_task(read())
        try:
            while True:
                deliver_at, data = await queue.get()
                wait = deliver_at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                while not self._flowing.is_set():
                    await self._flowing.wait()
                if isinstance(data, _EOF):
                    if connection.forgotten:
                        await asyncio.Event().wait()  # no FIN goes on either: the flow is gone
                    return
                if connection.forgotten:
                    continue
                tap = self._tap
                if tap is not None:
                    try:
                        tap(to_server, data)
                    except Exception as exc:
                        self.tap_errors.append(exc)
                writer.write(data)
                if to_server:
                    self._bytes_to_server += len(data)
                else:
                    self._bytes_to_client += len(data)
                try:
                    await writer.drain()
                except OSError:
                    return
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading


class ProxyLoop:
    """An asyncio loop in a daemon thread that serves any number of :class:`Link`.

    ``with ProxyLoop() as proxies: link = proxies.link(("127.0.0.1", port), name="c1-A")``.
    Leaving the block closes every link and joins the thread.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)
        self._links: list[Link] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def __enter__(self) -> ProxyLoop:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def links(self) -> list[Link]:
        with self._lock:
            return list(self._links)

    def link(self, target: tuple[str, int], *, name: str = "") -> Link:
        """A new link listening on a free 127.0.0.1 port, forwarding to ``target``."""
        if self._closed:
            raise RuntimeError("this ProxyLoop is closed")
        link = Link(self, (target[0], int(target[1])), name or f"link-{len(self._links) + 1}")
        self.call(link._start())
        with self._lock:
            self._links.append(link)
        return link

    def call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the loop thread and wait for its result."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a Link control was called from the proxy loop's own thread")
        if self._closed and not self._thread.is_alive():
            coroutine.close()
            raise RuntimeError("this ProxyLoop is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout=_CONTROL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _forget(self, link: Link) -> None:
        with self._lock:
            if link in self._links:
                self._links.remove(link)

    def close(self) -> None:
        """Close every link (all sockets), stop the loop and join its thread; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            links = list(self._links)
        try:
            for link in links:
                self.call(link._close())
            self.call(self._cancel_rest())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    async def _cancel_rest(self) -> None:
        # Anything still running (none, normally) is cancelled and awaited, so that the
        # loop closes with no pending task.
        current = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        await self._loop.shutdown_asyncgens()

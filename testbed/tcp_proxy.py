"""A TCP forwarder in the pytest process: how hosts of a test network reach a loopback server.

The session's servers (the control plane's API server above all) listen on 127.0.0.1, which
a process in a network namespace cannot reach. A partition test that cuts a driver off from
the API server therefore gives it the API server through a forwarder listening on the
network's root address (:attr:`testbed.netns.Network.root_ip`): cutting the host from
``ROOT`` then silences the API server for that host only, and the server keeps listening on
loopback alone.
"""

from __future__ import annotations

import logging
import socket
import threading
from contextlib import suppress

log = logging.getLogger(__name__)

_BUFFER = 64 * 1024


class TcpForwarder:
    """Forwards every connection to ``listen_ip`` (a free port) to ``target``.

    Args:
        listen_ip: The address to listen on, e.g. a test network's root address.
        target: ``(host, port)`` to forward to, e.g. the API server on loopback.
    """

    def __init__(self, listen_ip: str, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.create_server((listen_ip, 0))
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="tcp-forwarder", daemon=True)

    def start(self) -> TcpForwarder:
        """Starts accepting; returns itself."""
        self._thread.start()
        log.info("Forwarding listen=%s:%d target=%s:%d", *self.address, *self.target)
        return self

    def close(self) -> None:
        """Stops accepting and closes every forwarded connection."""
        self._closed.set()
        with suppress(OSError):
            self._server.close()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.close()
            self._sockets.clear()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError as error:
                log.warning("Forwarding failed target=%s:%d error=%s", *self.target, error)
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies ``source`` to ``sink`` until either side closes."""
    try:
        while data := source.recv(_BUFFER):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

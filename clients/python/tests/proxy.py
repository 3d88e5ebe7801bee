"""A TCP proxy on 127.0.0.1 whose live connections a test can cut (to drop a Watch stream),
optionally terminating TLS in front of a plaintext server."""

from __future__ import annotations

import socket
import ssl
import threading


class Proxy:
    def __init__(self, upstream_port: int, tls_context: ssl.SSLContext = None):
        self.upstream = ("127.0.0.1", upstream_port)
        self.tls = tls_context
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.conns: list = []
        self.accepted = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                if self.tls is not None:
                    client = self.tls.wrap_socket(client, server_side=True)
                upstream = socket.create_connection(self.upstream)
            except (OSError, ssl.SSLError):
                client.close()
                continue
            with self.lock:
                self.accepted += 1
                self.conns.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> int:
        """Closes every live connection (both sides, with a reset); returns how many."""
        with self.lock:
            conns, self.conns = self.conns, []
        for pair in conns:
            for s in pair:
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                except OSError:
                    pass
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass
        return len(conns)

    def close(self):
        self.closed = True
        self.cut()
        self.listener.close()

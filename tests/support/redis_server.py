"""A real ``redis-server`` (Debian's package) for the tests, on a loopback port of its own,
that a test can kill and start again on the same port, as an outage and its end; a replica of
one, and a ``redis-sentinel`` (Debian's ``redis-sentinel``) watching it, for a failover."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.support.harness import free_port
from tests.support.tools import required_program


class RedisServer:
    def __init__(self, directory: Path, replica_of: int | None = None) -> None:
        self.program = required_program("redis-server", "redis-server")
        self.directory = directory
        self.port = free_port()
        self.replica_of = replica_of  # the master's port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        # No persistence: a restart after a kill starts empty, as a cache node that lost its
        # memory does; the tests that need data to survive restart the proxies, not Redis.
        command = [self.program, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        if self.replica_of is not None:
            command += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_for_ping()

    def _wait_for_ping(self) -> None:
        assert self.process is not None
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if time.monotonic() > deadline or self.process.poll() is not None:
                        raise
                    time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True)


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.kill()


class SentinelServer(RedisServer):
    """``redis-sentinel`` watching the master on ``master_port`` as ``service``, quick to call
    it down (half a second) and to fail over."""

    def __init__(self, directory: Path, master_port: int, service: str) -> None:
        super().__init__(directory)
        self.program = required_program("redis-sentinel", "redis-sentinel")
        self.master_port = master_port
        self.service = service

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "sentinel.conf"  # Sentinel rewrites it: its own file
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 500\n"
            f"sentinel failover-timeout {self.service} 2000\n"
        )
        self.process = subprocess.Popen(
            [self.program, str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_for_ping()

    def master_port_now(self) -> int | None:
        """The port of the master Sentinel names now."""
        client = redis.Redis(port=self.port, decode_responses=True)
        try:
            address = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        return int(address[1]) if address else None

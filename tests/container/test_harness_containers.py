"""``EDGEDRIFT_TEST_CONTAINERS=1``: the harness's Mosquitto and PostgreSQL run as containers of a real Docker
engine (edgedrift_harness.containers), and behave as the local processes do: a broker restarted on the
same port with a persistent session's queued message kept, killed with SIGKILL; a PostgreSQL server whose
fresh databases the registry tests use. Skipped in a second without an engine or the images."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import docker
import docker.errors
import psycopg
import pytest

from edgedrift_harness import containers
from edgedrift_harness.mosquitto import local_mosquitto
from edgedrift_harness.mqtt import Subscriber, publish
from edgedrift_harness.postgres import PG_ADMIN_URL, fresh_database, postgres_server


def need(*images: str) -> None:
    problem = containers.engine_problem(images)
    if problem is not None:
        pytest.skip(problem)


@pytest.fixture
def in_containers(monkeypatch: pytest.MonkeyPatch) -> Iterator[docker.DockerClient]:
    need()
    monkeypatch.setenv(containers.ENV, "1")
    client = docker.from_env()
    yield client
    client.close()


def image_running_as(client: docker.DockerClient, pid: int) -> str | None:
    """The image of the running container whose first process is ``pid`` (None: no container's)."""
    for container in client.containers.list():
        if container.attrs["State"]["Pid"] == pid:
            return str(container.attrs["Config"]["Image"])
    return None


class Inbox(Subscriber):
    def __init__(self, url: str) -> None:
        self.got: list[bytes] = []
        self.arrived = threading.Event()
        super().__init__(url, [("queued/#", 1)], client_id="inbox", clean_session=False)

    def handle(self, topic: str, payload: bytes) -> None:
        self.got.append(payload)
        self.arrived.set()


def test_a_broker_in_a_container_keeps_its_port_and_sessions(
    in_containers: docker.DockerClient, tmp_path: Path
) -> None:
    need(containers.MOSQUITTO_IMAGE)
    with local_mosquitto(tmp_path / "broker") as broker:
        assert isinstance(broker.proc, containers.ContainerProcess)
        assert image_running_as(in_containers, broker.pid) == containers.MOSQUITTO_IMAGE
        port, first = broker.port, broker.pid
        with Inbox(broker.url):
            pass  # the persistent session exists, now offline
        publish(broker.url, "queued/a", [b"kept"])
        broker.restart()  # SIGTERM saves the session; the same port and data directory
        assert broker.port == port and broker.pid != first
        with Inbox(broker.url) as inbox:
            assert inbox.arrived.wait(10), f"the queued message was lost:\n{broker.log_tail()}"
            assert inbox.got == [b"kept"]
        assert isinstance(broker.proc, containers.ContainerProcess)
        killed = broker.proc.id
        broker.kill()
        with pytest.raises(docker.errors.NotFound):
            in_containers.containers.get(killed)  # SIGKILLed and removed
    assert "mosquitto version" in (tmp_path / "broker" / "mosquitto.log").read_text()


def test_postgresql_in_a_container(in_containers: docker.DockerClient) -> None:
    need(containers.POSTGRES_IMAGE)
    with postgres_server() as admin:
        assert admin != PG_ADMIN_URL
        port = str(urlsplit(admin).port)
        ours = [
            c.id
            for c in in_containers.containers.list(filters={"ancestor": containers.POSTGRES_IMAGE})
            if any(b["HostPort"] == port for bindings in c.ports.values() for b in bindings or [])
        ]
        assert len(ours) == 1, "no PostgreSQL container publishes the admin URL's port"
        with fresh_database(admin) as url, psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (42)")
            assert conn.execute("SELECT x FROM t").fetchone() == (42,)
    with pytest.raises(docker.errors.NotFound):
        in_containers.containers.get(ours[0])

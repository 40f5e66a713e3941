"""The shipped Mosquitto ACL as RabbitMQ permissions (``edgedrift_harness.rabbitmq.definitions``): the topic
permission regexes match exactly the routing keys (MQTT ``/`` as ``.``) and binding keys the ACL grants,
and each user's queue permissions name only its own client id's session queues. The real node enforcing
them: tests/integration/test_rabbitmq_broker.py."""

from __future__ import annotations

import base64
import hashlib
import re

from edgedrift_harness.rabbitmq import definitions, password_hash, topic_regex

USERS = {"dev-1": "a" * 20, "gw-1": "b" * 20, "replay": "c" * 20, "operator": "d" * 20}


def permissions(user: str) -> tuple[dict[str, str], dict[str, str]]:
    defs = definitions(USERS, gateways={"gw-1": ["dev-7", "dev-8"]})
    (vhost,) = [p for p in defs["permissions"] if p["user"] == user]
    (topic,) = [p for p in defs["topic_permissions"] if p["user"] == user]
    assert topic["exchange"] == "amq.topic"
    return vhost, topic


def matches(pattern: str, key: str) -> bool:
    return re.search(pattern, key) is not None


def test_a_device_reads_its_samples_and_labels_and_writes_its_answers_only() -> None:
    _, topic = permissions("dev-1")
    assert matches(topic["read"], "edgedrift.dev-1.samples") and matches(
        topic["read"], "edgedrift.dev-1.labels"
    )
    for other in (
        "edgedrift.dev-10.samples",
        "edgedrift.dev-2.samples",
        "edgedrift.#",
        "edgedrift.*.samples",
    ):
        assert not matches(topic["read"], other), other
    for kind in ("predictions", "events", "status"):
        assert matches(topic["write"], f"edgedrift.dev-1.{kind}")
        assert not matches(topic["write"], f"edgedrift.dev-2.{kind}")
    assert not matches(topic["write"], "edgedrift.dev-1.samples")


def test_a_gateway_serves_its_devices_and_its_own_status() -> None:
    _, topic = permissions("gw-1")
    assert matches(topic["read"], "edgedrift.dev-7.samples") and matches(
        topic["read"], "edgedrift.dev-8.labels"
    )
    assert not matches(topic["read"], "edgedrift.dev-1.samples")
    assert matches(topic["write"], "edgedrift.gateways.gw-1.status")
    assert not matches(topic["write"], "edgedrift.gateways.gw-2.status")


def test_replay_publishes_inputs_and_the_operator_reads_everything() -> None:
    _, replay = permissions("replay")
    assert matches(replay["write"], "edgedrift.dev-5.samples") and matches(
        replay["write"], "edgedrift.x.labels"
    )
    assert not matches(replay["write"], "edgedrift.dev-5.predictions")
    assert replay["read"] == "^$"
    _, operator = permissions("operator")
    assert matches(operator["read"], "edgedrift.#") and matches(operator["read"], "edgedrift.*.predictions")
    assert operator["write"] == "^$"


def test_queues_are_confined_to_the_users_client_id() -> None:
    vhost, _ = permissions("dev-1")
    assert matches(vhost["configure"], "mqtt-subscription-edgedrift-agent-dev-1qos1")
    assert not matches(vhost["configure"], "mqtt-subscription-edgedrift-agent-dev-10qos1")
    assert not matches(vhost["read"], "mqtt-subscription-watch-dev-1qos1")
    assert matches(vhost["write"], "amq.topic")


def test_topic_filters_become_routing_key_patterns() -> None:
    assert topic_regex(["a/+/c"]) == r"^(a\.[^.]+\.c)$"
    assert topic_regex([]) == "^$"


def test_the_password_hash_is_rabbitmqs_salted_sha256() -> None:
    salt = b"\x01\x02\x03\x04"
    raw = base64.b64decode(password_hash("secret", salt))
    assert raw[:4] == salt and raw[4:] == hashlib.sha256(salt + b"secret").digest()

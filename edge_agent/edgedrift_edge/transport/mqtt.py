"""Broker URLs and the paho-mqtt 2.x clients of the agent's transport, the replay and the harness: the
project's one MQTT library.

A broker URL is ``scheme://[user[:password]@]host[:port][/path]``: ``mqtt`` (TCP), ``mqtts`` (TLS),
``ws`` (WebSockets), ``wss`` (WebSockets over TLS); ``tcp`` and ``ssl`` are spellings of the first two.
An IPv6 host is written in brackets (``mqtt://[::1]:1883``). Errors about a URL never repeat it: it may
carry a password.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

#: scheme -> (TLS, paho transport)
SCHEMES: dict[str, tuple[bool, Literal["tcp", "websockets"]]] = {
    "mqtt": (False, "tcp"),
    "tcp": (False, "tcp"),
    "mqtts": (True, "tcp"),
    "ssl": (True, "tcp"),
    "ws": (False, "websockets"),
    "wss": (True, "websockets"),
}
_DEFAULT_PORTS = {
    ("tcp", False): 1883,
    ("tcp", True): 8883,
    ("websockets", False): 80,
    ("websockets", True): 443,
}
#: The MQTT versions the agent speaks (the ``mqtt_version`` setting).
MQTT_VERSIONS = ("3.1.1", "5")
#: How long a broker keeps an MQTT 5 session of an agent that is away, by default (as the shipped Mosquitto
#: keeps a 3.1.1 one: ``persistent_client_expiration``).
SESSION_EXPIRY_S = 7 * 24 * 3600
#: The largest expiry interval MQTT 5 can carry (a four-byte integer; this value means "never").
MAX_EXPIRY_S = 0xFFFFFFFF


@dataclass(frozen=True)
class BrokerAddress:
    """Where and how to reach a broker (from its URL)."""

    host: str
    port: int
    tls: bool
    transport: Literal["tcp", "websockets"]
    #: The WebSockets path (``/mqtt`` when the URL has none); unused over TCP.
    path: str
    username: str | None
    password: str | None


def parse_broker_url(url: str) -> BrokerAddress:
    """The parts of a broker URL; ValueError (without the URL, which may hold a password) if it is not one."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"must start with {', '.join(s + '://' for s in SCHEMES)}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ValueError(
            "the port is not a number (a password with '/', '?', '#' or '@' must be %-encoded)"
        ) from None
    if not host:
        raise ValueError("has no host (a password with '/', '?', '#' or '@' must be %-encoded)")
    tls, transport = SCHEMES[parts.scheme]
    return BrokerAddress(
        host=host,
        port=port or _DEFAULT_PORTS[(transport, tls)],
        tls=tls,
        transport=transport,
        path=parts.path or "/mqtt",
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def broker_address(url: str) -> tuple[str, int, bool]:
    """(host, port, tls) of a broker URL."""
    address = parse_broker_url(url)
    return address.host, address.port, address.tls


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in it (user and host kept as written: an IPv6 host keeps its brackets)."""
    parts = urlsplit(url)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    netloc = f"{user}:{quote(password, safe='')}@{hostport}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def session_login(url: str, device_id: str) -> str:
    """``url`` with its user ``u`` replaced by ``u.<device_id>``: a gateway's session of one device logs in
    as its own broker user (deploy/mosquitto/entrypoint.sh, ``MQTT_<GATEWAY>_SESSIONS=device``); a URL
    without a user is returned as it is."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url
    user, colon, password = userinfo.partition(":")
    netloc = f"{user}{quote('.' + device_id, safe='')}{colon}{password}@{hostport}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def make_client(
    url: str,
    client_id: str,
    *,
    clean_session: bool,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    mqtt_version: str = "3.1.1",
    manual_ack: bool = False,
    client_class: type[mqtt.Client] | None = None,
) -> mqtt.Client:
    """A VERSION2-callback client with the URL's credentials and transport, TLS (server verified; a client
    certificate and key when given) for mqtts and wss, and reconnect backoff. MQTT 5 has no clean-session
    flag: its callers pass ``clean_start`` and a session expiry to ``connect``."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    address = parse_broker_url(url)
    if mqtt_version not in MQTT_VERSIONS:
        raise ValueError(f"MQTT version {mqtt_version}: one of {', '.join(MQTT_VERSIONS)}")
    v5 = mqtt_version == "5"
    client = (client_class or mqtt.Client)(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=None if v5 else clean_session,
        protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
        transport=address.transport,
        manual_ack=manual_ack,
    )
    if address.username is not None:
        client.username_pw_set(address.username, address.password)
    if address.transport == "websockets":
        client.ws_set_options(path=address.path)
    if address.tls:
        client.tls_set(
            ca_certs=tls_ca_file, certfile=tls_cert_file, keyfile=tls_key_file, cert_reqs=ssl.CERT_REQUIRED
        )
    elif tls_cert_file or tls_key_file:
        raise ValueError("a client certificate needs TLS: an mqtts:// or wss:// broker URL")
    client.reconnect_delay_set(min_delay=1, max_delay=30)
    return client


def redact(url: str) -> str:
    """The URL without its credentials (for logs)."""
    parts = urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{hostport}"

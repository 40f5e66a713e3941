"""Broker URLs (the agent's connection reads them) and the paho-mqtt 2.x client of the replay command and
the harness (paho is imported only by :func:`make_client`: the agent does not load it)."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt


def broker_address(url: str) -> tuple[str, int, bool]:
    """(host, port, tls) of ``mqtt://[user:pw@]host:port`` or ``mqtts://...``."""
    parts = urlsplit(url)
    tls = parts.scheme in ("mqtts", "ssl")
    return parts.hostname or "127.0.0.1", parts.port or (8883 if tls else 1883), tls


def make_client(
    url: str, client_id: str, *, clean_session: bool, tls_ca_file: str | None = None
) -> mqtt.Client:
    """A VERSION2-callback client with the URL's credentials, TLS for mqtts, and reconnect backoff."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    parts = urlsplit(url)
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean_session, protocol=mqtt.MQTTv311
    )
    if parts.username:
        client.username_pw_set(unquote(parts.username), unquote(parts.password) if parts.password else None)
    if broker_address(url)[2]:
        client.tls_set(ca_certs=tls_ca_file, cert_reqs=ssl.CERT_REQUIRED)
    client.reconnect_delay_set(min_delay=1, max_delay=30)
    return client


def redact(url: str) -> str:
    """The URL without its credentials (for logs)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}"

"""Collecting what the demo's agents publish: every prediction by device and sample id."""

from __future__ import annotations

import json
import math
import secrets
import threading
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt

from edgedrift_demo.errors import DemoError
from edgedrift_edge.mqtt import broker_address, make_client


class PredictionCollector:
    """Subscribes to ``edgedrift/+/predictions`` and keeps every device's ``y_hat`` by sample id."""

    def __init__(self, broker_url: str, sizes: dict[str, int], prefix: str = "edgedrift") -> None:
        self.y_hat = {d: np.full(n, np.nan) for d, n in sizes.items()}
        self.seen = {d: np.zeros(n, dtype=bool) for d, n in sizes.items()}
        self.count = dict.fromkeys(sizes, 0)
        self.duplicates = dict.fromkeys(sizes, 0)
        self.unexpected = 0
        self.prefix = prefix
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self.client = make_client(
            broker_url, f"edgedrift-demo-collector-{secrets.token_hex(4)}", clean_session=True
        )
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *_: self._ready.set()
        self.client.on_message = self._on_message
        host, port, _tls = broker_address(broker_url)
        self.client.connect_async(host, port, keepalive=30)
        self.client.loop_start()
        if not self._ready.wait(30):
            self.close()
            raise DemoError(f"could not subscribe to the predictions at {broker_url}")

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if not reason.is_failure:
            client.subscribe(f"{self.prefix}/+/predictions", qos=1)

    def _on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        device = message.topic.split("/")[-2]
        try:
            body = json.loads(message.payload)
            preds = body.get("predictions", [body])
        except (ValueError, TypeError, KeyError):
            with self._lock:
                self.unexpected += 1
            return
        with self._lock:
            if device not in self.seen:
                self.unexpected += len(preds)
                return
            seen, y_hat = self.seen[device], self.y_hat[device]
            for p in preds:
                i = p.get("id")
                if not isinstance(i, int) or not 0 <= i < len(seen):
                    self.unexpected += 1
                elif seen[i]:
                    self.duplicates[device] += 1
                else:
                    seen[i] = True
                    y_hat[i] = math.nan if p.get("y_hat") is None else float(p["y_hat"])
                    self.count[device] += 1

    def received(self, device: str) -> int:
        with self._lock:
            return self.count[device]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

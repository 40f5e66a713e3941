"""A gateway's steps in its devices' hand-overs (:mod:`~edgedrift_edge.handover.moves` says why and in
which order): :class:`Handovers`, a collaborator the :class:`~edgedrift_edge.agent.EdgeAgent` owns and
calls on its worker thread; the cloud's answers come back through the agent's control queue."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import SecretStr

from edgedrift_edge.buffers.fair_queue import FairQueues
from edgedrift_edge.checkpoints import CheckpointError
from edgedrift_edge.cloud.client import CloudClient
from edgedrift_edge.device import DeviceRuntime
from edgedrift_edge.handover.moves import MAX_HELD, RETRY_S, Incoming, Outgoing
from edgedrift_edge.session.messages import count_items
from edgedrift_edge.transport.connection import Inbound
from edgedrift_edge.transport.sessions import Transport

log = logging.getLogger("edgedrift_edge")

#: A cloud call's answer handed to the worker: (its kind, the device, the call's future).
Reply = Callable[[str, DeviceRuntime, concurrent.futures.Future[Any]], None]


class Handovers:
    """The source's and the target's steps of every hand-over of one gateway's devices.

    It reads the gateway's devices and never adds or removes one: the agent does, through ``forget`` (a
    device handed over, no longer served) and ``serve`` (a device taken over: its start's events and its
    status go out)."""

    def __init__(
        self,
        gateway_id: str | None,
        secret: SecretStr | None,
        devices: Mapping[str, DeviceRuntime],
        transport: Transport,
        cloud: CloudClient,
        queues: FairQueues[str, tuple[DeviceRuntime, str, Inbound]],
        reply: Reply,
        forget: Callable[[DeviceRuntime], None],
        serve: Callable[[DeviceRuntime], None],
    ) -> None:
        self.gateway_id = gateway_id
        self._secret = secret
        self._devices = devices
        self._transport = transport
        self._cloud = cloud
        self._queues = queues
        self._reply = reply
        self._forget = forget
        self._serve = serve
        #: Devices this gateway handed over and the cloud may still list (an older sync's list).
        self.handed: set[str] = set()

    def _credential(self) -> tuple[str, str]:
        assert self.gateway_id is not None and self._secret is not None
        return self.gateway_id, self._secret.get_secret_value()

    def _call(self, device: DeviceRuntime, step: str, future: concurrent.futures.Future[Any]) -> None:
        """A step's call to the cloud is on its way; its answer comes back through the control queue."""
        handover = device.handover
        assert handover is not None
        handover.busy = True
        future.add_done_callback(lambda f: self._reply(f"handover:{step}", device, f))

    def on_sync(self, device: DeviceRuntime, flag: str) -> None:
        """The cloud's word on a device in a hand-over, at a sync."""
        gateway, secret = self._credential()
        h = device.handover
        topics = [device.topics["samples"], device.topics["labels"]]
        if flag in ("record", "release"):
            if not isinstance(h, Outgoing):
                h = device.handover = Outgoing()
                log.info("gateway %s: handing %s over: recording its messages", gateway, device.device_id)
            if h.busy or time.monotonic() < h.retry_at:
                return
            if flag == "record" and not h.reported:
                self._call(
                    device,
                    "recording",
                    self._cloud.handover_phase(gateway, secret, device.device_id, "recording"),
                )
            elif flag == "release" and not h.releasing:
                h.releasing = True
                self._transport.unsubscribe(topics)
                log.info("gateway %s: releasing %s", gateway, device.device_id)
        elif isinstance(h, Incoming) and not h.busy and flag == "take" and time.monotonic() >= h.retry_at:
            self._call(device, "take", self._cloud.handover_take(gateway, secret, device.device_id))

    def hold(self, device: DeviceRuntime, kind: str, message: Inbound) -> None:
        """The target keeps a message of a device it is taking over (acknowledged: the broker's window
        of unacknowledged messages is shared by every device of the gateway)."""
        h = device.handover
        assert isinstance(h, Incoming)
        if len(h.held) >= MAX_HELD:
            h.dropped += count_items(message.payload)
        else:
            h.held.append((kind, message._replace(qos=0)))  # acknowledged now, never again
        self._transport.done(message)

    def advance(self) -> None:
        """What a hand-over waits for on this side: the target's SUBACK, the source's UNSUBACK and the
        end of what it received before."""
        gateway, secret = self._credential()
        for device in list(self._devices.values()):
            h = device.handover
            if h is None or h.busy or time.monotonic() < h.retry_at:
                continue
            topics = [device.topics["samples"], device.topics["labels"]]
            if isinstance(h, Incoming):
                if not h.reported and self._transport.holds(topics):
                    self._call(
                        device,
                        "subscribed",
                        self._cloud.handover_phase(gateway, secret, device.device_id, "subscribed"),
                    )
            elif h.releasing and self._transport.left(topics) and not self._queues.held(device.device_id):
                device.sync_transport_counters()
                tree = {**device.snapshot(), "handover": h.handled}
                try:
                    blob = device.store.encode(tree)
                except CheckpointError as exc:
                    log.error("%s: hand-over state not made: %s", device.device_id, exc)
                    continue
                self._call(
                    device,
                    "release",
                    self._cloud.handover_release(gateway, secret, device.device_id, blob),
                )

    def on_answer(self, step: str, device: DeviceRuntime, future: concurrent.futures.Future[Any]) -> None:
        """The cloud's answer to a step."""
        h = device.handover
        if h is None:
            return
        h.busy = False
        error = None if future.cancelled() else future.exception()
        if future.cancelled() or error is not None:
            h.retry_at = time.monotonic() + RETRY_S
            log.warning(
                "%s: hand-over step %s failed (again at the next sync): %s", device.device_id, step, error
            )
            return
        if step in ("recording", "subscribed"):
            h.reported = True
        elif step == "release":
            self._released(device)
        elif step == "take" and isinstance(h, Incoming):
            self._taken(device, h, *future.result())

    def _released(self, device: DeviceRuntime) -> None:
        """The source's last step: the target has the state; this gateway forgets the device (its
        retained status stays the target's to write)."""
        self._forget(device)
        self.handed.add(device.device_id)
        log.info("gateway %s: %s handed over", self.gateway_id, device.device_id)

    def _taken(self, device: DeviceRuntime, h: Incoming, blob: bytes, secret: str) -> None:
        """The target's last step: continue from the source's state, then the held messages it did not
        handle, in order."""
        tree = device.adopt(blob)
        device.secret = secret
        notes = tree.get("handover") if tree is not None else None
        rest, overlapped = h.split(notes if isinstance(notes, dict) else {})
        device.add_dropped(h.dropped)
        device.handover = None
        for kind, message in rest:
            self._queues.put(device.device_id, (device, kind, message))
        log.info(
            "gateway %s: took over %s (%d held, %d of them handled by the source)",
            self.gateway_id, device.device_id, len(h.held), overlapped,
        )  # fmt: skip
        device.startup_events.append(
            {
                "type": "handover",
                "held": len(h.held),
                "overlap": overlapped,
                "dropped": h.dropped,
                "resumed": tree is not None,
            }
        )
        device.heard = time.monotonic()
        self._serve(device)

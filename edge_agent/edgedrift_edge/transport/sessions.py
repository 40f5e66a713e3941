"""A gateway's broker sessions, one per device: the transport a gateway uses with ``--broker-sessions
device``.

Why. A broker keeps one queue per client session (Mosquitto: ``max_queued_messages``,
``max_queued_bytes``). A gateway that is one client has one queue for all its devices: while it is away
(a restart, a network cut) one device's backlog fills that queue and the broker drops the other devices'
samples, and after the return they wait behind the backlog, in publish order (docs/benchmarks.md §23,
the ``restart`` phase). With a session per device each device's samples queue apart: a backlog fills only
its own device's queue, and the broker hands every session its messages side by side.

How. Each device's topics are subscribed by a :class:`~edgedrift_edge.transport.connection.MqttTransport`
of its own (its own client id, login and persistent session); its predictions, events and status are
published on it too, so that a message is still acknowledged on the connection it came on, after its
publishes (the transport's invariant). One more session, the gateway's own, publishes the gateway's status
and carries its last will; it subscribes to nothing and starts clean, which also drops what a run with
one session left under its client id (the devices' subscriptions: every sample would come twice). All
inboxes ring one doorbell, and :meth:`DeviceSessions.get_batch` takes from
them in turn. One I/O thread serves every session (:class:`~edgedrift_edge.transport.io_loop.IoLoop`: a
selector over all their sockets), so the worker's publishes of one round wake one thread, not one per
device.

Cost. One TCP connection (one file descriptor) per device. A process serves at most
:data:`MAX_SESSIONS` devices this way, fewer when its descriptor limit is lower (:func:`session_limit`
raises the soft limit, 1,024 on many systems, as far as the hard one allows); run more gateway processes
for more. With a broker that maps logins to client ids (the shipped ``use_username_as_clientid``), each
session logs in as ``<gateway user>.<device id>``
(deploy/mosquitto/entrypoint.sh makes these users with ``MQTT_<GATEWAY>_SESSIONS=device``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from edgedrift_edge.transport.connection import Bell, Inbound, MqttTransport, TransportCounters
from edgedrift_edge.transport.io_loop import IoLoop, yield_to

log = logging.getLogger("edgedrift_edge.transport.sessions")

#: Most device sessions of one process (module docstring).
MAX_SESSIONS = 1_000
#: Descriptors a gateway process keeps for everything but its device sessions (the cloud client's
#: connections, checkpoint files, the metrics server, the I/O loop's wake-up pair, the libraries').
RESERVED_FDS = 100


def session_limit(wanted: int = MAX_SESSIONS) -> int:
    """How many device sessions this process can hold, at most ``wanted``: one descriptor each within its
    ``RLIMIT_NOFILE`` (raised first, as far as the hard limit allows), less :data:`RESERVED_FDS`."""
    try:
        import resource
    except ImportError:  # not a Unix system: no descriptor limit to read
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(0, min(wanted, soft - RESERVED_FDS))


#: Seconds the summed counters are reused for.
COUNTERS_EVERY_S = 0.05
#: Builds a session: the device id (None: the gateway's own session) and the bell it rings.
SessionFactory = Callable[[str | None, Bell], MqttTransport]


class _SessionBell:
    """A session's bell: it notes the session as having mail, then rings the doorbell the worker waits on,
    so that the worker visits the sessions with mail, not all of them."""

    __slots__ = ("_doorbell", "_mail", "session")

    def __init__(self, mail: deque[MqttTransport], doorbell: threading.Event) -> None:
        self._mail, self._doorbell = mail, doorbell
        self.session: MqttTransport | None = None

    def set(self) -> None:
        if self.session is not None:
            self._mail.append(self.session)
        self._doorbell.set()


class DeviceSessions:
    """The :class:`MqttTransport` interface the agent uses, over one broker session per device (module
    docstring). ``device_of`` names the device of a topic (None: a topic of the gateway's own)."""

    def __init__(
        self, make: SessionFactory, device_of: Callable[[str], str | None], limit: int | None = None
    ) -> None:
        """``limit``: most device sessions (default :func:`session_limit`)."""
        self.limit = session_limit() if limit is None else limit
        self._make = make
        self._device_of = device_of
        self._doorbell = threading.Event()
        #: Sessions that rang (any thread appends); the worker moves them into ``_with_mail``.
        self._mail: deque[MqttTransport] = deque()
        #: Sessions that may hold messages not taken or not acknowledged yet, in the order they rang.
        self._with_mail: dict[MqttTransport, None] = {}
        #: Sessions published on since :meth:`retry_failed` last found nothing owed on them.
        self._published_on: set[MqttTransport] = set()
        self._io = IoLoop("edgedrift-mqtt")
        self.own = self._new(None)
        self._devices: dict[str, MqttTransport] = {}
        self._order: list[MqttTransport] = [self.own]
        self._next = 0
        self._started = False
        self._retiring: set[MqttTransport] = set()
        self._lock = threading.Lock()
        #: The gateway's own session is connected (what "connected to the broker" means for the agent: a
        #: device whose session cannot connect receives nothing and is reported silent in time).
        self.connected = self.own.connected
        self._summed, self._summed_at = TransportCounters(), -COUNTERS_EVERY_S

    @property
    def sessions(self) -> list[MqttTransport]:
        """Every session, the gateway's own first."""
        return list(self._order)

    def _session(self, topic: str) -> MqttTransport | None:
        """The session of ``topic``'s device (None: it has none now), or the gateway's own."""
        device = self._device_of(topic)
        return self.own if device is None else self._devices.get(device)

    def _opened(self, topic: str) -> MqttTransport:
        """The session of ``topic``'s device, opened (and started, once :meth:`start` ran) if it has none."""
        device = self._device_of(topic)
        if device is None:
            return self.own
        with self._lock:
            session = self._devices.get(device)
            if session is None:
                if len(self._devices) - len(self._retiring) >= self.limit:  # ending ones go soon
                    raise ValueError(
                        f"device {device}: this process holds at most {self.limit} device sessions "
                        "(its descriptor limit, or MAX_SESSIONS; run more gateway processes, or "
                        "--broker-sessions gateway)"
                    )
                session = self._devices[device] = self._new(device)
                self._order.append(session)
                if self._started:
                    session.begin(io=self._io)
        return session

    def _new(self, device: str | None) -> MqttTransport:
        bell = _SessionBell(self._mail, self._doorbell)
        session = bell.session = self._make(device, bell)
        return session

    def _sender(self, topic: str, owner: Inbound | None) -> MqttTransport:
        """Where a publish goes: the session ``owner`` came on (acknowledged there after it), else the
        session of ``topic``'s device; the gateway's own when that ended (its ACL grants its devices'
        topics too)."""
        if owner is not None:
            found = self.own if owner.session is None else self._devices.get(owner.session)
        else:
            found = self._session(topic)
        return found or self.own

    # --- lifecycle ------------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Connect every session; return once the gateway's own is connected (TimeoutError otherwise) and
        every device's is subscribed or ``timeout`` passed: a device session the broker refuses (no
        ``<user>.<device>`` user, an ACL without its topics) is logged and goes on retrying with backoff,
        and its device is reported silent; it does not keep the other devices from being served."""
        with self._lock:
            self._started = True
            sessions = list(self._order)
        for session in sessions:
            session.begin(io=self._io)
        deadline = time.monotonic() + timeout
        self.own.wait_subscribed(timeout)
        waiting = [s for s in sessions if s is not self.own]
        while waiting and time.monotonic() < deadline:
            waiting = [s for s in waiting if not s.subscribed.is_set() and s.refused is None]
            time.sleep(0.01)
        for session in sessions:
            if session.refused is not None:
                log.error(
                    "device %s: the broker refused its session (%s): does the broker have the user "
                    "<gateway user>.%s (deploy/mosquitto: MQTT_<GATEWAY>_SESSIONS=device)?",
                    session.name,
                    session.refused,
                    session.name,
                )

    def stop(self, drain_s: float = 5.0) -> None:
        """Drain, DISCONNECT and end every session (the gateway's own last, after its final status)."""
        deadline = time.monotonic() + drain_s
        devices = [s for s in self.sessions if s is not self.own]
        for session in devices:
            session.drain(deadline)
        for session in devices:
            session.halt()
        for session in devices:
            session.join(drain_s + 5)
        self.own.stop(max(1.0, deadline - time.monotonic()))  # the gateway's last status goes out

    # --- subscriptions --------------------------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        """Each topic on its device's session (opened if need be)."""
        for topic in topics:
            session = self._opened(topic)
            session.subscribe([topic])
            with self._lock:
                self._retiring.discard(session)

    def unsubscribe(self, topics: list[str]) -> None:
        """Leave the topics; a device session left with none ends once the broker acknowledged that and
        nothing is owed on it (:meth:`_retire`)."""
        for topic in topics:
            session = self._session(topic)
            if session is None:
                continue
            session.unsubscribe([topic])
            if session is not self.own and not session.subscriptions:
                with self._lock:
                    self._retiring.add(session)

    def holds(self, topics: list[str]) -> bool:
        """Whether the broker acknowledged every subscription."""
        for topic in topics:
            session = self._session(topic)
            if session is None or not session.holds([topic]):
                return False
        return True

    def left(self, topics: list[str]) -> bool:
        """Whether the broker acknowledged every unsubscription and the worker took what came before (an
        ended session: nothing more can come)."""
        for topic in topics:
            session = self._session(topic)
            if session is not None and not session.left([topic]):
                return False
        return True

    def dropped_for(self, topic: str) -> int:
        session = self._session(topic)
        return 0 if session is None else session.dropped_for(topic)

    # --- messages in ----------------------------------------------------------------------------------------

    def get_batch(
        self, timeout: float, limit: int = 1000, room: Callable[[str], int] | None = None
    ) -> list[Inbound]:
        """Up to ``limit`` messages, taken from the sessions in turn (a share of ``limit`` each first, then
        what is left), waiting up to ``timeout`` for the first. ``room`` says how many more messages of a
        device the caller takes now: a session left with none keeps them, its inbox fills, its socket is
        read no more, and the broker holds the rest in that device's own queue (back-pressure per device)."""
        if self._retiring:
            self._retire()
        while True:
            self._doorbell.clear()
            batch = self._gather(limit, room)
            if batch or timeout <= 0:
                return batch
            if not self._doorbell.wait(timeout):
                return []
            timeout = 0.0

    def _rung(self) -> dict[MqttTransport, None]:
        """The sessions that may hold messages (taken or not): those that rang since, added in order."""
        mail, with_mail = self._mail, self._with_mail
        while mail:
            with_mail[mail.popleft()] = None
        return with_mail

    def _gather(self, limit: int, room: Callable[[str], int] | None) -> list[Inbound]:
        waiting = [s for s in self._rung() if s.queued]
        if not waiting:
            return []
        start = self._next % len(waiting)
        self._next = start + 1
        turn = waiting[start:] + waiting[:start]
        left = {s: limit if room is None else room(s.name or "") for s in turn}
        batch: list[Inbound] = []
        for bound in (max(1, limit // len(waiting)), limit):
            for session in turn:
                if session.queued and left[session] > 0:
                    taken = session.get_batch(0.0, min(bound, left[session], limit - len(batch)))
                    left[session] -= len(taken)
                    batch += taken
                if len(batch) >= limit:
                    return batch
        return batch

    def _retire(self) -> None:
        """End the device sessions whose device left (their broker session stays, with no subscription)."""
        with self._lock:
            retiring = list(self._retiring)
        for session in retiring:
            if not session.unsubscribed:
                continue
            session.halt()
            with self._lock:
                self._retiring.discard(session)
                if self._devices.get(session.name or "") is session:
                    del self._devices[session.name or ""]
                self._order.remove(session)

    def done(self, message: Inbound) -> None:
        """Acknowledged on the session it came on (a session that ended meanwhile acknowledges nothing:
        the broker delivers it again)."""
        if message.session is None:
            self.own.done(message)
            return
        session = self._devices.get(message.session)
        if session is not None:
            session.done(message)

    @property
    def queued(self) -> int:
        """Messages received and not taken yet (any thread: it reads, never moves, the sessions that rang)."""
        return sum(s.queued for s in {*list(self._with_mail), *list(self._mail)})

    @property
    def unacked(self) -> int:
        """Messages received and not acknowledged yet (the worker): only a session that rang can owe any;
        one that owes none is visited no more until it rings again."""
        owed = {s: s.unacked for s in self._rung()}
        self._with_mail = {s: None for s, n in owed.items() if n}
        return sum(owed.values())

    # --- messages out ---------------------------------------------------------------------------------------

    def publish(
        self, topic: str, payload: dict[str, Any], *, retain: bool = False, owner: Inbound | None = None
    ) -> None:
        """On the session of ``owner`` (acknowledged on its connection after this), else of ``topic``."""
        sender = self._sender(topic, owner)
        self._published_on.add(sender)
        sender.publish(topic, payload, retain=retain, owner=owner)

    def publish_raw(
        self,
        topic: str,
        body: bytes,
        *,
        retain: bool = False,
        qos: int | None = None,
        owner: Inbound | None = None,
    ) -> None:
        sender = self._sender(topic, owner)
        self._published_on.add(sender)
        sender.publish_raw(topic, body, retain=retain, qos=qos, owner=owner)

    def retry_failed(self) -> int:
        """Publish again what the sessions published on could not queue (only a publish leaves one owed)."""
        waiting = 0
        for session in list(self._published_on):
            waiting += session.retry_failed()
            if not session.owes_publishes:
                self._published_on.discard(session)
        return waiting

    def wait_flushed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(s.wait_flushed(max(0.0, deadline - time.monotonic())) for s in self.sessions)

    @property
    def counters(self) -> TransportCounters:
        """The sessions' counters summed (at most every :data:`COUNTERS_EVERY_S`: every device reads them at
        each housekeeping turn)."""
        now = time.monotonic()
        if now - self._summed_at >= COUNTERS_EVERY_S:
            total = TransportCounters()
            names = [f.name for f in fields(TransportCounters)]
            for session in self.sessions:
                for name in names:
                    setattr(total, name, getattr(total, name) + getattr(session.counters, name))
            self._summed, self._summed_at = total, now
        return self._summed

    @property
    def reconnects(self) -> int:
        return sum(s.reconnects for s in self.sessions)

    def yield_io(self) -> None:
        """Let the I/O thread's turn over the sessions end first (:func:`yield_to`)."""
        yield_to(self._io)


#: What the agent sends and receives through: one session, or one per device.
Transport = MqttTransport | DeviceSessions

"""Per-device queues of a gateway's worker, drained round-robin (issue 30 row 1).

One MQTT connection carries every device of a gateway, and the broker delivers its messages in the order
they were published: a device that bursts 60,000 messages put 118 s of backlog in front of its 20 quiet
neighbours. Here each device has a queue of its own and the worker takes one message of each device in
turn, so a quiet device's message waits for at most one message of every other device, never for a
flood's backlog.

That alone is not enough: the broker sends a client at most ``max_inflight_messages`` unacknowledged
messages, and acknowledgements go out in arrival order, so a flood the gateway keeps unhandled fills that
window and the quiet devices' messages stay at the broker. A device that holds ``share`` messages while
the gateway holds ``pressure`` unacknowledged ones is therefore *refused* further messages (they are
acknowledged at once, counted in ``dropped`` and ``overloaded``, and reported by one ``overloaded`` event
per interval), which drains the window at the rate messages arrive instead of the rate they are handled.

Refusing only helps someone when someone is *quiet*: a device that has sent for at least ``span``
seconds, within the last ``span`` seconds, at most ``quiet_limit`` messages a second on average and
never ``PEAK`` times that in one second (:class:`Arrivals`). When every busy device is over that rate (a
replay of several devices at once, a backlog after a restart) nobody is refused and the window's
back-pressure holds the rest at the broker, as for a single device; a device under its share, any
device while the window has room, and a device that is quiet itself are never refused.

Turns are shared by the worker's time, not by messages (deficit round-robin): each turn gives a device
``quantum`` seconds of credit (never more than that saved up), the worker charges what its message took
(:meth:`FairQueues.charge`), and a device in debt lets its turns pass until the rounds repaid it. One
message a turn whatever it cost let a device whose messages are expensive (wide rows, a d x d monitor:
60 ms a labeled sample at 2,048 features) set every round's length, and its quiet neighbours waited that
long for each of their messages. When every waiting device is in debt the rounds are skipped ahead at
once: the worker never idles while messages wait. A turn may take several of a device's queued messages
at once, unless the device floods (:meth:`FairQueues.floods`: more than ``quiet_limit`` a second's worth
over the last ``span`` seconds), whose messages are taken one a turn. Pure: no threads, no I/O, the clock is
passed in; the agent's worker owns one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

#: A quiet key's busiest second, in multiples of its average limit.
PEAK = 5

#: Seconds a scan of every key that found no quiet one is trusted (the next refusal asked for sooner is
#: answered from it).
QUIET_REFRESH_S = 0.1

#: The worker's time a key is given per turn (seconds): a message cheaper than this is taken at every
#: turn of its key (a batch of 100 samples costs about a millisecond).
QUANTUM_S = 0.002


class Arrivals(Generic[K]):
    """Messages per key and second over the last ``span`` seconds: which keys are quiet."""

    def __init__(self, span: int = 10) -> None:
        self.span = span
        self._first: dict[K, float] = {}
        self._counts: dict[K, list[int]] = {}  # a ring of per-second counts, by second % span
        self._last: dict[K, int] = {}  # the second of the key's last arrival

    def add(self, key: K, now: float) -> None:
        """One message of ``key`` at ``now`` (seconds)."""
        second = int(now)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0] * self.span
            self._first[key] = now
            self._last[key] = second
        last = self._last[key]
        if second != last:
            for passed in range(last + 1, min(second, last + self.span) + 1):
                counts[passed % self.span] = 0
            self._last[key] = second
        counts[second % self.span] += 1

    def quiet(self, key: K, now: float, limit: float) -> bool:
        """Heard for ``span`` seconds and within the last ``span``, at most ``limit`` messages a second
        on average over them and never ``PEAK`` times that in one second (arrivals bunch up when the
        broker's window stalls, so one second alone says little)."""
        window = self._window(key, now)
        if window is None or now - self._first[key] < self.span:
            return False
        return sum(window) <= limit * self.span and max(window) <= PEAK * limit

    def busy(self, key: K, now: float, limit: float) -> bool:
        """More than ``limit`` messages a second's worth over the last ``span`` seconds, however long it
        has been heard: a device that floods, or whose backlog is larger than a span of traffic at the
        limit (a quiet device's queue from a gateway's short absence is not)."""
        window = self._window(key, now)
        return window is not None and sum(window) > limit * self.span

    def _window(self, key: K, now: float) -> list[int] | None:
        """``key``'s messages in each second of the last ``span`` (none before it was first heard), or None
        unless it has been heard within the last ``span``."""
        counts = self._counts.get(key)
        second, last = int(now), self._last.get(key, 0)
        if counts is None or second - last >= self.span:
            return None
        return [counts[s % self.span] for s in range(second - self.span + 1, last + 1)]

    def heard(self) -> list[K]:
        """Every key heard so far."""
        return list(self._counts)


class FairQueues(Generic[K, T]):
    """FIFO queues per key, taken from round-robin; a key past ``share`` is refused under ``pressure``
    while another key is quiet (at most ``quiet_limit`` messages a second)."""

    def __init__(
        self, share: int, pressure: int, quiet_limit: float = 20.0, span: int = 10, quantum: float = QUANTUM_S
    ) -> None:
        if share < 1 or pressure < 1:
            raise ValueError("share and pressure are at least one message")
        if quantum <= 0:
            raise ValueError("the quantum is a positive time")
        self.share = share
        self.pressure = pressure
        self.quiet_limit = quiet_limit
        self.quantum = quantum
        #: Seconds of the worker's time each key may still take (negative: owes); a key absent has 0.
        self._credit: dict[K, float] = {}
        self.arrivals: Arrivals[K] = Arrivals(span)
        #: The last key found quiet (checked again before it is trusted), and when a scan found none.
        self._quiet_key: K | None = None
        self._none_quiet_at = -math.inf
        self._queues: dict[K, deque[T]] = {}
        self._turns: deque[K] = deque()  # keys with a non-empty queue, in the order they are served
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def held(self, key: K) -> int:
        """Messages of ``key`` waiting."""
        queue = self._queues.get(key)
        return 0 if queue is None else len(queue)

    def over_share(self, key: K, unacknowledged: int, now: float) -> bool:
        """Whether a new message of ``key`` must be refused: the key holds its share while the gateway
        holds ``pressure`` messages unacknowledged (``unacknowledged`` excludes the ones queued here),
        ``key`` is not quiet itself and another key is. A quiet key is never refused: when every key is
        quiet (a large fleet at an even rate the worker cannot keep up with), refusing one helps no other,
        and the window's back-pressure holds the rest at the broker."""
        if self.held(key) < self.share or unacknowledged + self._size < self.pressure:
            return False
        if self.arrivals.quiet(key, now, self.quiet_limit):
            return False
        return self._another_quiet(key, now)

    def _another_quiet(self, key: K, now: float) -> bool:
        """Whether a key other than ``key`` is quiet now: the last one found, checked again, or the first a
        scan finds (a scan of every key every 0.1 s, as before, cost a gateway of 1,000 devices a twentieth of
        its worker); a scan that found none is trusted for :data:`QUIET_REFRESH_S`."""
        arrivals, limit, last = self.arrivals, self.quiet_limit, self._quiet_key
        if last is not None and last != key and arrivals.quiet(last, now, limit):
            return True
        if now - self._none_quiet_at < QUIET_REFRESH_S:
            return False
        found = next((k for k in arrivals.heard() if k != key and arrivals.quiet(k, now, limit)), None)
        self._quiet_key = found
        if found is None:
            self._none_quiet_at = now
        return found is not None

    def put(self, key: K, item: T) -> None:
        """Queue ``item`` behind ``key``'s earlier ones."""
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        if not queue:
            self._turns.append(key)
        queue.append(item)
        self._size += 1

    def take(self) -> tuple[K, T] | None:
        """The oldest message of the first key in turn with credit (that key then goes to the back; keys
        in debt it passed go there too, one quantum repaid), or None."""
        turns, credit, quantum = self._turns, self._credit, self.quantum
        passed = 0
        while turns:
            key = turns.popleft()
            balance = credit[key] = min(credit.get(key, 0.0) + quantum, quantum)
            if balance > 0:
                break
            turns.append(key)
            passed += 1
            if passed >= len(turns):  # every waiting key in debt: the rounds that repay the least of them
                rounds = max(1, min(math.ceil(-credit[k] / quantum) for k in turns))
                for k in turns:
                    credit[k] += (rounds - 1) * quantum
                passed = 0
        else:
            return None
        queue = self._queues[key]
        item = queue.popleft()
        self._size -= 1
        if queue:
            turns.append(key)
        else:
            del self._queues[key]
        return key, item

    def take_more(self, key: K, limit: int, same: Callable[[T], bool]) -> list[T]:
        """Up to ``limit`` more of ``key``'s oldest messages, while ``same`` holds for them (the worker
        handles them with the one :meth:`take` gave, charged as one turn)."""
        queue = self._queues.get(key)
        more: list[T] = []
        while queue and len(more) < limit and same(queue[0]):
            more.append(queue.popleft())
        self._size -= len(more)
        if queue is not None and not queue:
            del self._queues[key]
            if self._turns and self._turns[-1] == key:  # where take() just put it
                self._turns.pop()
            else:
                self._turns.remove(key)
        return more

    def floods(self, key: K, now: float) -> bool:
        """Whether ``key`` has sent more than ``quiet_limit`` messages a second's worth over the last span
        (:meth:`Arrivals.busy`): the worker then takes its messages one a turn, not together."""
        return self.arrivals.busy(key, now, self.quiet_limit)

    def balance(self, key: K) -> float:
        """Seconds of the worker's time ``key`` may still take (negative: it owes)."""
        return self._credit.get(key, 0.0)

    def charge(self, key: K, seconds: float) -> None:
        """``key``'s message took the worker ``seconds``. A key with nothing queued keeps a debt and forgets
        a credit (credit is not saved up between bursts; a debt is repaid whether or not it waits)."""
        balance = self._credit.get(key, 0.0) - seconds
        if balance >= 0 and key not in self._queues:
            self._credit.pop(key, None)
        else:
            self._credit[key] = balance

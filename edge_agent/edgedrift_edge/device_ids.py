"""Which device ids a gateway serves: every source of ids (``--devices``, ``--devices-file``, the cloud's
list) goes through the one check :func:`edgedrift.ids.device_id_problem`; :func:`configured_devices` reads
those the settings name.

An id that is an MQTT wildcard (``a+b``, ``#``), a topic level or a path (``x/y``, ``../../escape``),
too long or empty would break the gateway's SUBSCRIBE (the broker closes the connection: no device served
at all) or name a checkpoint file outside ``checkpoint_dir``. Such an id is refused alone: logged once,
listed with its reason in the gateway's retained status (``refused``); the other devices are served.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from edgedrift.ids import device_id_problem, shown_id
from edgedrift_edge.settings import AgentSettings, SettingsError, device_list

log = logging.getLogger("edgedrift_edge")


class DeviceIds:
    """The refused ids of one gateway (as shown: cut, quoted) with their reasons."""

    def __init__(self, gateway_id: str | None, limit: int | None = None) -> None:
        self.gateway_id = gateway_id
        #: Most devices served at once (a broker session each: transport.sessions.MAX_SESSIONS), or None.
        self.limit = limit
        self.refused: dict[str, str] = {}
        self._reported = 0

    def admit(self, device_id: str) -> bool:
        """Whether ``device_id`` may be served; a refused one is logged the first time it is seen."""
        problem = device_id_problem(device_id)
        if problem is None:
            return True
        self._refuse(device_id, problem)
        return False

    def _refuse(self, device_id: str, problem: str) -> None:
        shown = shown_id(device_id)
        if shown not in self.refused:
            self.refused[shown] = problem
            log.error("gateway %s: device id %s refused: %s", self.gateway_id, shown, problem)

    def admitted(self, listed: Mapping[str, str | None], need_one: bool = False) -> dict[str, str | None]:
        """The devices of ``listed`` (id -> secret) whose id may be served, the first ``limit`` of them
        by id; with ``need_one`` (a fixed list, not the cloud's), :class:`SettingsError` when every one was
        refused."""
        admitted = {d: secret for d, secret in listed.items() if self.admit(d)}
        if self.limit is not None and len(admitted) > self.limit:
            for device_id in sorted(admitted)[self.limit :]:
                del admitted[device_id]
                self._refuse(
                    device_id,
                    f"a gateway process with a broker session per device serves at most {self.limit} "
                    "devices: run another gateway process for the rest",
                )
        if need_one and listed and not admitted:
            raise SettingsError("no device to serve: every device id was refused (see the log)")
        return admitted

    def news(self) -> bool:
        """Whether ids were refused since the last call (the gateway's status should say so)."""
        news, self._reported = len(self.refused) > self._reported, len(self.refused)
        return news

    def listing(self) -> list[dict[str, str]]:
        """The refused ids for the gateway's status."""
        return [{"id": shown, "reason": reason} for shown, reason in self.refused.items()]


def configured_devices(settings: AgentSettings) -> dict[str, str | None]:
    """The devices named by the settings, with their cloud secrets (None: none known yet)."""
    if settings.device_id is not None:
        secret = settings.device_secret.get_secret_value() if settings.device_secret else None
        return {settings.device_id: secret}
    devices: dict[str, str | None] = {}
    if settings.devices_file:
        try:
            table = json.loads(Path(settings.devices_file).read_text())
        except (OSError, ValueError) as exc:
            raise SettingsError(f"--devices-file: cannot read it: {type(exc).__name__}") from None
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in table.items()
        ):
            raise SettingsError('--devices-file: expected a JSON object {"device-id": "secret", ...}')
        devices.update(table)
    for device in device_list(settings.devices or ""):
        devices.setdefault(device, None)
    return devices

"""Schemathesis fuzzes the real server from its own OpenAPI schema with every check (issue 12, row 12):
no 5xx, every status and header documented, every body as declared, schema-violating requests refused,
schema-valid ones accepted, credentials enforced, 405 with the resource's methods in ``Allow``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.cloud import DEVICES, OPERATOR, CloudServer

TESTS = Path(__file__).resolve().parent.parent

#: Most generated device ids are someone else's (403): pin it so the handlers are reached. The version is
#: pinned with it: schemathesis 4.32 checks a coverage-phase request whose pinned ``device_id`` replaced a
#: negated one by validating the path as sent, with ``version`` as the string "1" against its integer
#: schema, and so reports a valid request as "schema-violating request accepted".
OWN_DEVICE = '[parameters]\n"path.device_id" = "dev-a"\n"path.version" = 1\n'
#: Deregistration without ``purge`` revokes the credential and keeps the history readable by the operator
#: (documented in docs/cloud-trainer.md), which ``use_after_free`` would report as a deleted resource still
#: served; with ``purge=true`` the device and its history are gone, and that check holds the API to it.
PURGE = '"query.purge" = true\n'
#: Whether a window can be trained on depends on its values beyond what JSON Schema can state (rows of one
#: width, one label per row, labels of the task, a binary body's layout, the cost cap), so a schema-valid
#: window may get a 422 naming the field; the other statuses ``positive_data_acceptance`` accepts stay.
TRAINING = """
[[operations]]
include-name = "POST /v1/devices/{device_id}/models"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]

[[operations]]
include-name = "POST /v1/devices/{device_id}/history"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
"""

#: Whether a secret is strong enough (5 distinct characters, no repeated pattern, no placeholder: the rule
#: the service applies to its own secrets at start) is beyond JSON Schema too: a valid secret may get a 422.
SECRETS = "".join(
    f'''
[[operations]]
include-name = "{name}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
'''
    for name in ("PUT /v1/devices/{device_id}", "POST /v1/bulk/devices", "PUT /v1/gateways/{gateway_id}")
)


#: 410 Gone (a version pruned by retention, documented on the version routes) is the permanent form of the
#: 404 that ``positive_data_acceptance`` accepts for a schema-valid request naming a missing resource.
ACCEPTED = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "410", "429"]
"""


def config(fixed_device: bool, operator: bool) -> str:
    """The schemathesis.toml of one case."""
    pinned = (OWN_DEVICE if fixed_device else "[parameters]\n") + (PURGE if operator else "")
    return pinned + ACCEPTED + TRAINING + SECRETS


@pytest.mark.parametrize(
    ("token", "fixed_device"),
    [(DEVICES["dev-a"], True), (OPERATOR, True), (DEVICES["dev-a"], False)],
    ids=["device-own-id", "operator", "device-random-ids"],
)
def test_schemathesis_all_checks_pass(
    sqlite_cloud: CloudServer, tmp_path: Path, token: str, fixed_device: bool
) -> None:
    sqlite_cloud.register("dev-a", DEVICES["dev-a"])  # an earlier case may have rotated or purged it
    (tmp_path / "schemathesis.toml").write_text(config(fixed_device, token == OPERATOR))
    env = {**os.environ, "PYTHONPATH": str(TESTS), "SCHEMATHESIS_HOOKS": "support.schemathesis_hooks"}
    cli = Path(sys.executable).with_name("schemathesis")
    proc = subprocess.run(
        [
            str(cli),
            "run",
            f"{sqlite_cloud.url}/openapi.json",
            "--checks",
            "all",
            "--header",
            f"Authorization: Bearer {token}",
            "--max-examples",
            "30",
            "--seed",
            "7",
            "--no-color",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert re.search(r"\d+ generated, \d+ passed", proc.stdout), proc.stdout[-2000:]
    with sqlite_cloud.client(None) as c:
        metrics = c.get("/metrics").text
    # /readyz answers 503 while the training pool starts (the harness polls it): not a server error
    served = [line for line in metrics.splitlines() if 'route="/readyz"' not in line]
    assert not re.search(r'edgedrift_http_requests_total\{[^}]*status="5\d\d"\}', "\n".join(served))
    assert re.search(
        r'edgedrift_http_requests_total\{method="POST",route="/v1/devices/\{device_id\}/models",'
        r'status="4\d\d"\} [1-9]',
        metrics,
    )

"""A Prometheus server as a child process, scraping the given targets with the shipped rules
(``deploy/prometheus/rules.yml``) on a free port of 127.0.0.1, ready once ``/-/ready`` answers 200; and
:class:`PrometheusAPI`, the client of any Prometheus's HTTP API (this process's, or a container's):
instant PromQL queries and the alerts with their state."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from edgedrift_harness.ports import HOST, free_port
from edgedrift_harness.processes import log_tail, stop_process, wait_answering

__all__ = ["SHIPPED_RULES", "PrometheusAPI", "PrometheusError", "PrometheusProcess", "find_prometheus"]

SHIPPED_RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules.yml"


class PrometheusError(RuntimeError):
    """Prometheus is missing, exited, did not become ready, or refused a query."""


def find_prometheus() -> str | None:
    """Path of the Prometheus server binary, or None when it is not installed."""
    return shutil.which("prometheus")


class PrometheusAPI:
    """The HTTP API of the Prometheus at ``url`` (``http://host:port``)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def tail(self, lines: int = 20) -> str:
        """What to show when a wait fails (a process's log; nothing for a server not started here)."""
        return ""

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; its ``data`` (PrometheusError unless the status is success)."""
        reply = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10.0)
        body = reply.json()
        if reply.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {reply.status_code} {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query: the result vector, one ``{"metric": labels, "value": [t, "v"]}`` per series."""
        data = self.api("query", query=promql)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Poll ``promql`` until it returns at least one series; PrometheusError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if result:
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(f"{promql!r} returned nothing within {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.25)

    def alerts(self) -> list[dict[str, Any]]:
        """``/api/v1/alerts``: every pending or firing alert (``labels``, ``state``, ``activeAt``)."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return found


class PrometheusProcess(PrometheusAPI):
    """``prometheus`` scraping ``targets`` (host:port) as job ``job`` every ``interval_s`` seconds, with
    ``rules`` evaluated at the same period (a group's own ``interval`` wins); a context manager."""

    def __init__(
        self,
        workdir: Path,
        targets: list[str],
        *,
        job: str = "edgedrift-cloud",
        interval_s: float = 1.0,
        rules: Path | None = SHIPPED_RULES,
    ) -> None:
        binary = find_prometheus()
        if binary is None:
            raise PrometheusError("needs Prometheus (apt-get install -y prometheus)")
        self.binary = binary
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        super().__init__(f"http://{HOST}:{self.port}")
        self.log_path = workdir / "prometheus.log"
        self.config_path = workdir / "prometheus.yml"
        period = f"{round(interval_s * 1000)}ms"
        config: dict[str, Any] = {
            "global": {"scrape_interval": period, "evaluation_interval": period},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
        }
        if rules is not None:  # groups without an interval of their own are evaluated at this period
            config["rule_files"] = [str(rules)]
        self.config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Self:
        cmd = [
            self.binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={HOST}:{self.port}", "--log.level=warn",
        ]  # fmt: skip
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        if wait_answering(f"{self.url}/-/ready", self.proc, timeout):
            return self
        if self.proc.poll() is not None:
            raise PrometheusError(f"prometheus exited with code {self.proc.returncode}:\n{self.tail()}")
        self.stop()
        raise PrometheusError(f"prometheus was not ready within {timeout:.0f} s:\n{self.tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, 15.0)

    def tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines, "(no log)")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

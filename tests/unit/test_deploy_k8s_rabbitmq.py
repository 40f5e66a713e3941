"""deploy/k8s/rabbitmq/ validated offline: ``kubectl kustomize`` renders the 3-node RabbitMQ cluster, every
object validates against the Kubernetes schemas (strict), and its parts fit together: a StatefulSet of
three nodes behind a headless Service that publishes not-ready addresses (peer discovery needs them), the
k8s peer-discovery backend pointed at that Service with a Role that lets the pods' ServiceAccount read its
endpoints, the MQTT plugin enabled, durable sessions on quorum queues, and a configuration equal to
deploy/rabbitmq/ (the file the harness runs locally)."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from typing import Any

import kubernetes_validate
import pytest
import yaml
from support.dockerfiles import ROOT

from edgedrift_harness.rabbitmq import parse_conf, shipped_config

DIR = ROOT / "deploy" / "k8s" / "rabbitmq"
KUBERNETES_VERSION = "1.32"
KUBECTL = shutil.which("kubectl")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (renders the manifests)")


@cache
def rendered() -> tuple[dict[str, Any], ...]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(DIR)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def find(kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in rendered() if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def config() -> dict[str, str]:
    data: dict[str, str] = next(o for o in rendered() if o["kind"] == "ConfigMap")["data"]
    return data


def test_every_object_validates_against_the_schemas() -> None:
    kinds = {o["kind"] for o in rendered()}
    assert {"StatefulSet", "Service", "ConfigMap", "Role", "RoleBinding", "ServiceAccount"} <= kinds
    for obj in rendered():
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} is invalid: {exc.message} at {list(exc.path)}"
            )


def test_three_nodes_form_a_cluster_by_kubernetes_peer_discovery() -> None:
    sts = find("StatefulSet", "rabbitmq")
    assert sts["spec"]["replicas"] == 3
    headless = find("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    conf = parse_conf(config()["rabbitmq.conf"])
    assert conf["cluster_formation.peer_discovery_backend"] == "rabbit_peer_discovery_k8s"
    assert (
        conf["cluster_formation.k8s.service_name"] == headless["metadata"]["name"] == env["K8S_SERVICE_NAME"]
    )
    suffix = conf["cluster_formation.k8s.hostname_suffix"]
    namespace = sts["metadata"]["namespace"]
    assert suffix == f".{headless['metadata']['name']}.{namespace}.svc.cluster.local"
    assert env["RABBITMQ_NODENAME"].endswith(
        f".{headless['metadata']['name']}.$(MY_POD_NAMESPACE).svc.cluster.local"
    )
    # The pods' ServiceAccount may read the endpoints (and its token is mounted for that).
    assert pod["automountServiceAccountToken"] is True
    binding = find("RoleBinding", "rabbitmq-peer-discovery")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": pod["serviceAccountName"],
            "namespace": sts["metadata"]["namespace"],
        }
    ]
    role = find("Role", binding["roleRef"]["name"])
    assert any("endpoints" in r["resources"] and "get" in r["verbs"] for r in role["rules"])
    plugins = config()["enabled_plugins"]
    assert "rabbitmq_mqtt" in plugins and "rabbitmq_peer_discovery_k8s" in plugins
    # A drain keeps the quorum queues' majority.
    assert find("PodDisruptionBudget", "rabbitmq")["spec"]["maxUnavailable"] == 1


def test_durable_sessions_are_quorum_queues_on_a_volume() -> None:
    conf = parse_conf(config()["rabbitmq.conf"])
    assert conf["mqtt.durable_queue_type"] == "quorum"
    assert conf["mqtt.allow_anonymous"] == "false"
    sts = find("StatefulSet", "rabbitmq")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in sts["spec"]["volumeClaimTemplates"]}
    assert mounts[next(iter(claims))] == "/var/lib/rabbitmq"
    assert conf["load_definitions"].startswith(mounts["definitions"] + "/")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RABBITMQ_CONFIG_FILE"] == f"{mounts['config']}/rabbitmq.conf"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["mqtt"] == int(conf["mqtt.listeners.tcp.default"]) == 1883
    assert find("Service", "rabbitmq")["spec"]["ports"][0]["targetPort"] == "mqtt"


def test_the_container_is_pinned_limited_probed_and_unprivileged() -> None:
    pod = find("StatefulSet", "rabbitmq")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    name, _, tag = container["image"].rpartition(":")
    assert name == "rabbitmq" and tag.startswith("3.10"), container["image"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    assert "readinessProbe" in container and "livenessProbe" in container
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


@pytest.mark.parametrize("name", ["rabbitmq.conf", "enabled_plugins"])
def test_the_cluster_runs_the_shipped_configuration(name: str) -> None:
    """kustomize reads no file outside its directory: deploy/k8s/rabbitmq/ holds copies, kept equal here."""
    assert (DIR / name).read_bytes() == (ROOT / "deploy" / "rabbitmq" / name).read_bytes()


def test_the_harness_runs_the_shipped_mqtt_settings(tmp_path: Any) -> None:
    """The local node (edgedrift_harness.rabbitmq) keeps every mqtt.* setting of the shipped file except
    its listener, and drops only the cluster's lines."""
    shipped = parse_conf((ROOT / "deploy" / "rabbitmq" / "rabbitmq.conf").read_text())
    local = parse_conf(shipped_config(18830, definitions_file=tmp_path / "d.json"))
    for key, value in shipped.items():
        if key.startswith("mqtt.") and not key.startswith("mqtt.listeners."):
            assert local[key] == value, key
    assert local["mqtt.listeners.tcp.default"] == "127.0.0.1:18830"
    assert not [k for k in local if k.startswith("cluster_formation.")]

"""deploy/k8s/ validated offline: ``kubectl kustomize`` renders each overlay, every rendered object validates
against the Kubernetes schemas (``kubernetes-validate``, strict: unknown fields fail), images carry a pinned
tag, every container has requests, limits, probes and a non-root security context, the references between
objects resolve, the network policies let only gateways reach the broker, and the gateway pods run the
agent in gateway mode with settings that match the broker's and the cloud's."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml
from support.dockerfiles import ROOT

from edgedrift_cloud.settings import ENV_PREFIX as CLOUD_PREFIX
from edgedrift_cloud.settings import SECRET_FIELDS as CLOUD_SECRET_FIELDS
from edgedrift_cloud.settings import CloudSettings
from edgedrift_edge.device import recent_samples_size
from edgedrift_edge.device_ids import configured_devices
from edgedrift_edge.settings import AgentSettings

K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("dev", "prod")
#: The cluster version the objects are validated for (the kubectl on the test machines).
KUBERNETES_VERSION = "1.32"
KUBECTL = shutil.which("kubectl")
WORKLOADS = {"Deployment", "StatefulSet", "Job"}

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (renders the overlays)")


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, f"kubectl kustomize {overlay} failed:\n{out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def find(overlay: str, kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in rendered(overlay) if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{overlay}: expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def containers(overlay: str) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(workload, pod spec, container) for every container and init container of every workload."""
    for obj in rendered(overlay):
        if obj["kind"] in WORKLOADS:
            spec = pod_spec(obj)
            for container in spec.get("initContainers", []) + spec["containers"]:
                yield obj, spec, container


def label(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


#: KEDA's ScaledObject (keda.sh/v1alpha1, a CRD: kubernetes-validate has no schema for it): the fields of
#: KEDA 2.x's CRD that a ScaledObject may set, strict like the validation of the built-in kinds.
SCALED_OBJECT: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "advanced": {"type": "object"},
                "fallback": {"type": "object"},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string"},
                            "name": {"type": "string"},
                            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                            "authenticationRef": {"type": "object"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}
#: The metadata keys of KEDA's Redis list scaler (keda.sh/docs/scalers/redis-lists).
REDIS_SCALER_KEYS = {
    "address", "host", "port", "listName", "listLength", "activationListLength", "databaseIndex",
    "enableTLS", "unsafeSsl", "usernameFromEnv", "passwordFromEnv",
}  # fmt: skip


def validate(obj: dict[str, Any]) -> None:
    """kubernetes-validate for the built-in kinds, :data:`SCALED_OBJECT` for KEDA's."""
    if obj["apiVersion"].startswith("keda.sh/"):
        jsonschema.validate(obj, SCALED_OBJECT)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_against_the_schemas(overlay: str) -> None:
    objects = rendered(overlay)
    assert len(objects) >= 14
    for obj in objects:
        try:
            validate(obj)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
            pytest.fail(f"{overlay}: {label(obj)} is invalid: {exc.message} at {list(exc.path)}")


def test_the_scaled_object_schema_rejects_a_broken_object() -> None:
    """A negative control for the CRD's schema: a misspelt field or a number as a string fails."""
    scaled = find("prod", "ScaledObject", "trainer-worker")
    typo = {**scaled, "spec": {**scaled["spec"], "maxReplicas": 8}}
    wrong_type = {**scaled, "spec": {**scaled["spec"], "minReplicaCount": "1"}}
    for broken in (typo, wrong_type):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_training_workers_scale_on_the_queue_the_cloud_fills(overlay: str) -> None:
    """The trainer-worker Deployment runs the worker with the cloud's settings; KEDA scales it on the
    depth of the very Redis list the cloud queues its jobs on (the settings' URL and namespace)."""
    from edgedrift_cloud.job_queue import Keys

    worker = find(overlay, "Deployment", "trainer-worker")
    container = pod_spec(worker)["containers"][0]
    assert container["command"][:2] == ["edgedrift-cloud", "trainer-worker"]
    assert container["envFrom"] == [{"configMapRef": {"name": "cloud-settings"}}]
    settings = find(overlay, "ConfigMap", "cloud-settings")["data"]
    assert settings["EDGEDRIFT_CLOUD_TRAINING"] == "queue"
    url = urlsplit(settings["EDGEDRIFT_CLOUD_JOBS_REDIS_URL"])
    namespace = settings.get(
        "EDGEDRIFT_CLOUD_JOBS_NAMESPACE", CloudSettings.model_fields["jobs_namespace"].default
    )
    scaled = find(overlay, "ScaledObject", "trainer-worker")["spec"]
    assert scaled["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "trainer-worker",
    }
    assert 1 <= scaled["minReplicaCount"] < scaled["maxReplicaCount"]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "redis" and set(trigger["metadata"]) <= REDIS_SCALER_KEYS
    assert trigger["metadata"]["listName"] == Keys(namespace).queue
    assert trigger["metadata"]["address"] == f"{url.hostname}:{url.port}"
    redis = find(overlay, "Service", "redis")
    assert redis["metadata"]["name"] == url.hostname and redis["spec"]["ports"][0]["port"] == url.port
    assert int(url.path.strip("/") or 0) == int(trigger["metadata"].get("databaseIndex", 0))


def test_the_validator_rejects_a_broken_object() -> None:
    """A negative control: the validation above would catch a misspelt field or a wrong type."""
    cloud = find("prod", "Deployment", "cloud")
    typo = {**cloud, "spec": {**cloud["spec"], "replica": 2}}
    wrong_type = {**cloud, "spec": {**cloud["spec"], "replicas": "two"}}
    for broken in (typo, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_expected_objects_exist(overlay: str) -> None:
    find(overlay, "Service", "cloud")
    find(overlay, "Service", "mosquitto")
    hpa = find(overlay, "HorizontalPodAutoscaler", "cloud")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cloud"}
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    pdb = find(overlay, "PodDisruptionBudget", "cloud")
    cloud = find(overlay, "Deployment", "cloud")
    assert pdb["spec"]["selector"]["matchLabels"] == cloud["spec"]["selector"]["matchLabels"]
    migrate = find(overlay, "Job", "cloud-migrate")
    assert pod_spec(migrate)["containers"][0]["command"] == ["edgedrift-cloud", "migrate"]
    assert migrate["spec"]["activeDeadlineSeconds"] > 0, "a Job has no probes: a deadline bounds it"
    broker = find(overlay, "StatefulSet", "mosquitto")
    claims = {c["metadata"]["name"] for c in broker["spec"]["volumeClaimTemplates"]}
    mounts = {m["name"]: m["mountPath"] for m in pod_spec(broker)["containers"][0]["volumeMounts"]}
    assert mounts[next(iter(claims))] == "/mosquitto/data", "the persistence store is on the volume"
    gateways = [o for o in rendered(overlay) if o["kind"] == "Deployment" and "gateway" in label(o)]
    assert gateways and all(g["spec"]["strategy"]["type"] == "Recreate" for g in gateways)
    kinds = {o["kind"] for o in rendered(overlay)}
    assert "NetworkPolicy" in kinds


def test_dev_runs_postgres_and_prod_uses_an_external_database() -> None:
    postgres = find("dev", "StatefulSet", "postgres")
    assert postgres["spec"]["volumeClaimTemplates"]
    dev = find("dev", "ConfigMap", "cloud-settings")["data"]
    assert dev["EDGEDRIFT_CLOUD_DATABASE_URL"].startswith("postgresql+psycopg://edgedrift@postgres:5432/")
    assert not any(o["metadata"]["name"] == "postgres" for o in rendered("prod"))
    prod = find("prod", "ConfigMap", "cloud-settings")["data"]
    assert "EDGEDRIFT_CLOUD_DATABASE_URL" not in prod
    assert prod["EDGEDRIFT_CLOUD_DATABASE_URL_FILE"].startswith("/run/secrets/edgedrift/")
    assert prod["EDGEDRIFT_CLOUD_MODE"] == "production"
    assert not [o for o in rendered("prod") if o["kind"] == "Secret"], "prod must ship no secret"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned(overlay: str) -> None:
    for workload, _, container in containers(overlay):
        image = container["image"]
        name, _, tag = image.rpartition(":") if "@" not in image else (image, "", "digest")
        assert name and tag and "/" not in tag, f"{label(workload)}: {image} has no tag"
        assert tag != "latest", f"{label(workload)}: {image} uses latest"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_resources_probes_and_runs_as_non_root(overlay: str) -> None:
    seen = 0
    for workload, spec, container in containers(overlay):
        where = f"{overlay}: {label(workload)} container {container['name']}"
        seen += 1
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(kind, {})), f"{where}: {kind} cpu/memory"
        if workload["kind"] != "Job":  # a Job runs to completion: activeDeadlineSeconds bounds it
            assert "readinessProbe" in container and "livenessProbe" in container, f"{where}: probes"
        pod = spec.get("securityContext", {})
        own = container.get("securityContext", {})
        assert own.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, f"{where}: runAsNonRoot"
        assert own.get("runAsUser", pod.get("runAsUser", 0)) != 0, f"{where}: runs as uid 0"
        assert own.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation"
        assert own.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: capabilities"
        assert spec.get("automountServiceAccountToken") is False, f"{where}: no API token needed"
    assert seen >= 4


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cloud_probes_and_service_match_the_service(overlay: str) -> None:
    cloud = find(overlay, "Deployment", "cloud")
    container = pod_spec(cloud)["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    command = container["command"]
    assert ports["http"] == int(command[command.index("--port") + 1])
    service = find(overlay, "Service", "cloud")
    assert service["spec"]["selector"].items() <= pod_spec_labels(cloud).items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def pod_spec_labels(obj: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_environment_variables_are_settings_the_programs_read(overlay: str) -> None:
    """A misspelt EDGEDRIFT_* variable would be ignored silently by the cloud or the agent."""
    cloud_names = {CLOUD_PREFIX + f.upper() for f in CloudSettings.model_fields}
    cloud_names |= {CLOUD_PREFIX + f.upper() + "_FILE" for f in CLOUD_SECRET_FIELDS}
    agent_names = set(AgentSettings.env_names())
    settings = find(overlay, "ConfigMap", "cloud-settings")["data"]
    assert set(settings) <= cloud_names, set(settings) - cloud_names
    for workload, _, container in containers(overlay):
        names = {e["name"] for e in container.get("env", []) if e["name"].startswith("EDGEDRIFT_")}
        known = agent_names if "gateway" in label(workload) else cloud_names | {"EDGEDRIFT_MODE"}
        assert names <= known, f"{label(workload)}: unknown {names - known}"


def test_dev_references_resolve() -> None:
    """Every ConfigMap, Secret and claim a dev pod names exists in the render (dev is self-contained)."""
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered("dev")}
    for workload, spec, container in containers("dev"):
        wanted: set[tuple[str, str]] = set()
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                wanted.add(("ConfigMap", source["configMapRef"]["name"]))
            if "secretRef" in source:
                wanted.add(("Secret", source["secretRef"]["name"]))
        for env in container.get("env", []):
            if ref := env.get("valueFrom", {}).get("secretKeyRef"):
                wanted.add(("Secret", ref["name"]))
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                wanted.add(("Secret", volume["secret"]["secretName"]))
            if "configMap" in volume:
                wanted.add(("ConfigMap", volume["configMap"]["name"]))
            if "persistentVolumeClaim" in volume:
                wanted.add(("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]))
        assert wanted <= names, f"{label(workload)}: missing {wanted - names}"


def test_prod_secrets_are_documented() -> None:
    """Prod ships no Secret: each one its pods name is in deploy/k8s/README.md for the operator."""
    readme = (K8S / "README.md").read_text()
    wanted = set()
    for _, spec, container in containers("prod"):
        wanted |= {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        wanted |= {s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s}
    assert wanted == {"cloud-secrets", "mqtt-passwords", "gateway-1-credentials"}
    for name in wanted:
        assert f"`{name}`" in readme, f"{name} is not documented in deploy/k8s/README.md"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_gateways_reach_the_broker_and_gateways_or_operators_the_cloud(overlay: str) -> None:
    policies = {o["metadata"]["name"]: o["spec"] for o in rendered(overlay) if o["kind"] == "NetworkPolicy"}
    deny = policies["default-deny-ingress"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"] and "ingress" not in deny
    broker = policies["broker-from-gateways"]
    assert broker["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}}}],
            "ports": [{"protocol": "TCP", "port": 1883}],
        }
    ]
    cloud = policies["cloud-from-gateways-and-operators"]["ingress"]
    sources = [next(iter(s.values()))["matchLabels"] for s in cloud[0]["from"]]
    assert sources == [
        {"app.kubernetes.io/component": "gateway"},
        {"edgedrift.io/operator": "true"},
        {"edgedrift.io/operator": "true"},
    ]
    # The selectors select what they mean to: the broker's and the cloud's pods, and the gateways.
    for kind, name, component in [
        ("StatefulSet", "mosquitto", "broker"),
        ("Deployment", "cloud", "cloud"),
        ("Deployment", "gateway-1", "gateway"),
    ]:
        assert pod_spec_labels(find(overlay, kind, name))["app.kubernetes.io/component"] == component


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gateways_serve_metrics_where_prometheus_and_the_policies_look(overlay: str) -> None:
    """A gateway pod's /metrics: the port its annotations name is the one the agent listens on
    (EDGEDRIFT_EDGE_METRICS_PORT), a declared container port, and the one a policy opens to operators
    (Prometheus) on the gateways' pods."""
    gateways = [o for o in rendered(overlay) if o["kind"] == "Deployment" and "gateway" in label(o)]
    policies = [o["spec"] for o in rendered(overlay) if o["kind"] == "NetworkPolicy"]
    for gateway in gateways:
        annotations = gateway["spec"]["template"]["metadata"]["annotations"]
        assert (
            annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
        )
        port = int(annotations["prometheus.io/port"])
        (container,) = pod_spec(gateway)["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert int(env["EDGEDRIFT_EDGE_METRICS_PORT"]) == port, label(gateway)
        assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]
        component = pod_spec_labels(gateway)["app.kubernetes.io/component"]
        opened = [
            p
            for p in policies
            if p["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component") == component
            for rule in p.get("ingress", [])
            if {"protocol": "TCP", "port": port} in rule["ports"]
            and {"namespaceSelector": {"matchLabels": {"edgedrift.io/operator": "true"}}} in rule["from"]
        ]
        assert opened, f"{label(gateway)}: no policy lets Prometheus reach port {port}"


@pytest.mark.parametrize("name", ["mosquitto.conf", "acl", "entrypoint.sh", "tls.conf"])
def test_broker_config_is_the_compose_stacks(name: str) -> None:
    """kustomize reads no file outside its directory, so base/mosquitto/ holds copies: kept equal here
    (after a change in deploy/mosquitto/, copy the file over)."""
    copy: Path = K8S / "base" / "mosquitto" / name
    assert copy.read_bytes() == (ROOT / "deploy" / "mosquitto" / name).read_bytes()


def secret_data(overlay: str, name: str) -> dict[str, str]:
    """The decoded data of the rendered Secret ``name`` (the generated name a pod refers to)."""
    data: dict[str, str] = find(overlay, "Secret", name)["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gateways_run_the_agent_in_gateway_mode(overlay: str) -> None:
    """A gateway pod serves its devices as one gateway (--gateway-id, the devices file from its Secret),
    not as the agent of one device."""
    gateways = [o for o in rendered(overlay) if o["kind"] == "Deployment" and "gateway" in label(o)]
    assert gateways
    for gateway in gateways:
        spec = pod_spec(gateway)
        (container,) = spec["containers"]
        assert container["args"] == ["agent"], label(gateway)
        env = {e["name"]: e for e in container["env"]}
        assert "EDGEDRIFT_EDGE_GATEWAY_ID" in env and "EDGEDRIFT_EDGE_DEVICE_ID" not in env, label(gateway)
        assert "EDGEDRIFT_EDGE_DEVICE_SECRET_FILE" not in env, "a gateway holds its devices' secrets"
        files = {
            f"{m['mountPath']}/{item['path']}"
            for m in container["volumeMounts"]
            for v in spec["volumes"]
            if v["name"] == m["name"] and "secret" in v
            for item in v["secret"]["items"]
        }
        for name in ("EDGEDRIFT_EDGE_DEVICES_FILE", "EDGEDRIFT_EDGE_BROKER_PASSWORD_FILE"):
            assert env[name]["value"] in files, f"{label(gateway)}: {name} is not a mounted Secret key"


def test_the_dev_gateway_settings_load_and_match_the_broker_and_the_cloud(tmp_path: Path) -> None:
    """The dev gateway's environment and Secret files, as the pod gets them, load as agent settings; its
    broker user is a gateway whose password and ACL cover exactly its devices, and each device's cloud
    secret is the one the cloud provisions."""
    gateway = find("dev", "Deployment", "gateway-1")
    spec = pod_spec(gateway)
    (container,) = spec["containers"]
    root = tmp_path / "pod"
    moved: dict[str, str] = {}
    for mount in container["volumeMounts"]:
        for volume in spec["volumes"]:
            if volume["name"] == mount["name"] and "secret" in volume:
                data = secret_data("dev", volume["secret"]["secretName"])
                for item in volume["secret"]["items"]:
                    path = root / mount["mountPath"].lstrip("/") / item["path"]
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(data[item["key"]])
                    moved[f"{mount['mountPath']}/{item['path']}"] = str(path)
    environ = {}
    for env in container["env"]:
        if "value" in env:
            environ[env["name"]] = moved.get(env["value"], env["value"])
        else:
            ref = env["valueFrom"]["secretKeyRef"]
            environ[env["name"]] = secret_data("dev", ref["name"])[ref["key"]]
    settings = AgentSettings.load(environ=environ)
    assert settings.gateway_id == "gw-1" and settings.device_id is None
    devices = configured_devices(settings)
    assert devices == {"dev-1": "dev-1-insecure"}
    assert recent_samples_size(settings) == 900, "per-device recent samples sized from the label delay"

    broker = pod_spec(find("dev", "StatefulSet", "mosquitto"))["containers"][0]
    (mqtt_ref,) = [s["secretRef"]["name"] for s in broker["envFrom"] if "secretRef" in s]
    mqtt = secret_data("dev", mqtt_ref)
    user = urlsplit(settings.broker_url).username
    assert user == settings.gateway_id and user in mqtt["MQTT_GATEWAYS"].replace(",", " ").split()
    var = "MQTT_" + user.upper().replace("-", "_")
    assert settings.broker_password is not None
    assert settings.broker_password.get_secret_value() == mqtt[f"{var}_PASSWORD"]
    assert set(mqtt[f"{var}_DEVICES"].replace(",", " ").split()) == set(devices)

    cloud = pod_spec(find("dev", "Deployment", "cloud"))
    (cloud_ref,) = [v["secret"]["secretName"] for v in cloud["volumes"] if "secret" in v]
    provisioned = dict(pair.split("=", 1) for pair in secret_data("dev", cloud_ref)["devices"].split(","))
    assert {d: provisioned.get(d) for d in devices} == devices

"""The images' names and tags, checked offline: compose names every EdgeDrift image through the two variables
``IMAGE_PREFIX`` and ``IMAGE_TAG``, the multi-architecture build (``deploy/docker-bake.json``, run by
``scripts/images.sh``) builds the Dockerfiles compose builds, for linux/amd64 and linux/arm64, under the
same names; the Kubernetes manifests get their names and tags from one place, the base's ``images:``,
whose tag is the release."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from support.compose import COMPOSE, ENV_EXAMPLE, compose_variables, dockerfile_of, load_compose
from support.dockerfiles import ROOT

BAKE = ROOT / "deploy" / "docker-bake.json"
K8S = ROOT / "deploy" / "k8s"
VERSION = (ROOT / "shared" / "VERSION").read_text().strip()
OURS = ("edgedrift-cloud", "edgedrift-edge")


def bake_tag(target: str, env: dict[str, str]) -> str:
    """A bake target's tag with its variables resolved as bake does (the environment, else the default)."""
    bake: dict[str, Any] = json.loads(BAKE.read_text())
    defaults = {name: str(v.get("default", "")) for name, v in bake["variable"].items()}
    (tag,) = bake["target"][target]["tags"]
    return re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), defaults[m.group(1)]), str(tag))


def test_compose_names_its_images_through_the_two_variables() -> None:
    variables = compose_variables(COMPOSE)
    assert variables["IMAGE_PREFIX"] == "" and variables["IMAGE_TAG"] == "local"
    env = {"IMAGE_PREFIX": "registry.test/team/", "IMAGE_TAG": "9.9.9"}
    built = {
        name: service
        for name, service in load_compose(COMPOSE, env=env)["services"].items()
        if "build" in service
    }
    assert built, "compose builds no image"
    for name, service in built.items():
        assert re.fullmatch(r"registry\.test/team/edgedrift-(cloud|edge):9\.9\.9", service["image"]), (
            f"{name}: {service['image']} does not follow IMAGE_PREFIX/IMAGE_TAG"
        )
    example = ENV_EXAMPLE.read_text()
    assert re.search(r"^IMAGE_PREFIX=$", example, re.M) and re.search(r"^IMAGE_TAG=local$", example, re.M)


def test_bake_builds_what_compose_builds_for_both_architectures() -> None:
    bake: dict[str, Any] = json.loads(BAKE.read_text())
    assert set(bake["group"]["default"]["targets"]) == {"cloud", "edge"}
    assert set(bake["target"]["_common"]["platforms"]) == {"linux/amd64", "linux/arm64"}
    services = load_compose(COMPOSE)["services"]
    for target in ("cloud", "edge"):
        spec = bake["target"][target]
        assert spec["inherits"] == ["_common"]
        image = f"edgedrift-{target}"
        compose_files = {
            dockerfile_of(s) for s in services.values() if "build" in s and s["image"].startswith(image)
        }
        assert compose_files == {ROOT / spec["dockerfile"]}, (
            f"{target}: bake and compose build different files"
        )
        env = {"IMAGE_PREFIX": "registry.test/team/", "IMAGE_TAG": "9.9.9"}
        assert bake_tag(target, env) == f"registry.test/team/{image}:9.9.9"
        assert bake_tag(target, {}) == f"{image}:local", "bake's defaults differ from compose's"
    script = (ROOT / "scripts" / "images.sh").read_text()
    assert "shared/VERSION" in script and "deploy/docker-bake.json" in script


def test_kubernetes_images_are_set_in_the_base_only() -> None:
    base = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    images = {entry["name"]: entry for entry in base["images"]}
    for name in OURS:
        assert images[name]["newTag"] == VERSION, f"{name}: the base's tag is not the release {VERSION}"
    for overlay in sorted((K8S / "overlays").iterdir()):
        spec = yaml.safe_load((overlay / "kustomization.yaml").read_text())
        assert "images" not in spec, f"{overlay.name} sets images: the base's images: is the one place"
    for manifest in sorted((K8S / "base").glob("*.yaml")):
        for line in manifest.read_text().splitlines():
            if line.strip().startswith("image:"):
                assert ":" not in line.split("image:", 1)[1], f"{manifest.name}: {line.strip()} names a tag"
    assert "registry.example.com" not in (K8S / "README.md").read_text()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (renders the overlays)")
@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_rendered_overlays_run_the_release(overlay: str) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    images = set(re.findall(r"image: (\S+)", out.stdout))
    ours = {image for image in images if image.rsplit(":", 1)[0].endswith(OURS)}
    assert ours == {f"{name}:{VERSION}" for name in OURS}

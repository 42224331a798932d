"""The chart's default image is the one Dockerfile.gpu says it builds, the `-cpu` variant is the
one Dockerfile.cpu builds, and chart, images and package carry one version (pyproject.toml's).

The tag a Dockerfile builds is the `docker build -f ... -t IMAGE .` line of its header comment,
the command its readers copy; the chart forms its default as image.repository:<appVersion>-gpu.
"""

from __future__ import annotations

import re

import helm_python
import pytest
import yaml

from tests.chart.helpers import CHART_DIR, REPO_ROOT, one, ray_containers, render
from tests.packaging.build_context import DOCKERFILES, pyproject
from tests.packaging.dockerfiles import Dockerfile

_BUILD = re.compile(r"^docker build -f (\S+) -t (\S+) \.$")


def _app_version() -> str:
    version: str = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]
    return version


def _documented_image(variant: str) -> str:
    """The image the Dockerfile's header tells you to build, checking it names its own file."""
    path = DOCKERFILES[variant]
    builds = [m for c in Dockerfile.read(path).comments() if (m := _BUILD.match(c.strip()))]
    assert len(builds) == 1, f"{path.name}: expected one `docker build -f ... -t ... .` line"
    assert builds[0].group(1) == path.relative_to(REPO_ROOT).as_posix()
    return builds[0].group(2)


def _images(chart: helm_python.Chart, values: dict[str, object] | None = None) -> set[str]:
    return {c["image"] for c in ray_containers(one(render(chart, values), "RayService"))}


def test_chart_app_version_is_the_package_version() -> None:
    assert _app_version() == pyproject(REPO_ROOT)["project"]["version"]


def test_default_image_is_the_tag_dockerfile_gpu_builds(chart: helm_python.Chart) -> None:
    repository = chart.values["image"]["repository"]
    assert chart.values["image"]["tag"] == ""  # empty: derived from appVersion
    expected = f"{repository}:{_app_version()}-gpu"
    assert _images(chart) == {expected}
    assert _documented_image("gpu") == expected


def test_cpu_variant_is_the_tag_dockerfile_cpu_builds(chart: helm_python.Chart) -> None:
    repository = chart.values["image"]["repository"]
    expected = f"{repository}:{_app_version()}-cpu"
    assert _documented_image("cpu") == expected
    # The header's helm command selects it, and the chart then runs exactly that image.
    header = "\n".join(Dockerfile.read(DOCKERFILES["cpu"]).comments())
    helm_tag = re.search(r"--set image\.tag=(\S+)", header)
    assert helm_tag and helm_tag.group(1) == f"{_app_version()}-cpu"
    assert _images(chart, {"image": {"tag": helm_tag.group(1)}}) == {expected}


@pytest.mark.parametrize("variant", sorted(DOCKERFILES))
def test_images_carry_the_package_version_as_oci_labels(variant: str) -> None:
    project = pyproject(REPO_ROOT)["project"]
    labels = Dockerfile.read(DOCKERFILES[variant]).labels
    assert labels["org.opencontainers.image.version"] == project["version"] == _app_version()
    assert labels["org.opencontainers.image.title"] == project["name"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]["text"]

"""Keys → tenants: the tenant key file, the plain key list, PDSERVE_API_KEY, and errors that
never echo a key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdserve.config import AuthConfig
from pdserve.router.tenants.directory import AuthConfigError, TenantDirectory, key_digest

TENANT_FILE = """
tenants:
  - name: search
    weight: 3
    priority: 0
    keys: [sk-search-1, sk-search-2]
    limits: {requests_per_minute: 600, tokens_per_minute: 200000, max_concurrent_requests: 32}
  - name: batch
    priority: 1
    key_sha256: [%s]
    limits: {max_prompt_tokens: 8000}
  - name: default
    weight: 0.5
"""


def load(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> TenantDirectory:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    return TenantDirectory.load(AuthConfig(api_key_file=str(path)), environ or {})


def test_the_tenant_file_maps_keys_and_digests_to_tenants(tmp_path: Path) -> None:
    d = load(tmp_path, TENANT_FILE % key_digest("sk-batch"), {"PDSERVE_API_KEY": "sk-env"})
    search = d.resolve("Bearer sk-search-2")
    assert search is not None and search.name == "search" and search.weight == 3.0
    assert search.limits.requests_per_minute == 600
    batch = d.resolve("Bearer sk-batch")
    assert batch is not None and batch.name == "batch" and batch.priority == 1
    env = d.resolve("Bearer sk-env")
    assert env is not None and env.name == "default" and env.weight == 0.5
    assert d.resolve("Bearer sk-other") is None and d.resolve(None) is None
    assert d.resolve("Basic sk-search-1") is None
    assert [t.name for t in d.tenants] == ["batch", "default", "search"]
    assert d.guards("/v1/completions") and not d.guards("/health")


def test_the_plain_list_makes_each_key_its_own_tenant(tmp_path: Path) -> None:
    d = load(tmp_path, "# team keys\nsk-one\n\n sk-two \n")
    one, two = d.resolve("Bearer sk-one"), d.resolve("Bearer sk-two")
    assert one is not None and two is not None and one.name != two.name
    assert one.name == f"key-{key_digest('sk-one')[:8]}" and one.weight == 1.0
    assert "sk-one" not in one.name


def test_no_keys_is_one_open_default_tenant() -> None:
    d = TenantDirectory.load(AuthConfig(), {})
    assert not d.enabled
    tenant = d.resolve(None)
    assert tenant is not None and tenant.name == "default"
    assert d.resolve("Bearer anything") is tenant


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tenants:\n  - name: a\n    keys: [sk-secret-dup]\n"
         "  - name: b\n    keys: [sk-secret-dup]\n", "two tenants"),
        ("tenants:\n  - name: a\n  - name: a\n", "unique"),
        ("tenants:\n  - name: 'bad name'\n    keys: [sk-secret-x]\n", "tenants.0.name"),
        ("tenants:\n  - name: a\n    weight: 0\n    keys: [sk-secret-x]\n", "tenants.0.weight"),
        ("tenants:\n  - name: a\n    key_sha256: [sk-secret-x]\n", "64 lowercase hex"),
        ("tenants:\n  - name: a\n    keys: [sk-secret-x]\n    wieght: 2\n", "wieght"),
        ("tenants: [\n  sk-secret-x", "not valid YAML"),
    ],
)  # fmt: skip
def test_a_bad_tenant_file_names_the_problem_not_the_key(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(AuthConfigError, match=r"keys\.yaml") as err:
        load(tmp_path, text)
    assert problem in str(err.value)
    assert "sk-secret" not in str(err.value)


def test_sharing_needs_two_tenants_with_keys(tmp_path: Path) -> None:
    assert not TenantDirectory.load(AuthConfig(), {}).shared
    assert not TenantDirectory.load(AuthConfig(), {"PDSERVE_API_KEY": "sk-a,sk-b"}).shared
    assert load(tmp_path, "sk-one\nsk-two\n").shared  # a plain list: a tenant per key
    assert load(tmp_path, TENANT_FILE % key_digest("sk-batch")).shared

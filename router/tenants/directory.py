"""Who is asking: API keys → tenants (pure; read once per router replica at start).

`TenantDirectory.load(auth, environ)` reads the keys: the key file (`router.auth.api_key_file`),
either the tenant format (YAML `tenants: [...]`, pdserve.tenant_config.TenantFile) or the plain
list of keys (one per line: each key its own tenant, named `key-` + the first 8 hex digits of
its SHA-256), and the keys in `router.auth.api_key_env` (the `default` tenant). Keys are kept
only as SHA-256 digests; `resolve` hashes the presented key and looks the digest up. No keys
at all: the API is open and every request is the `default` tenant's.
"""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml
from pydantic import ValidationError

from pdserve.router_config import AuthConfig
from pdserve.tenant_config import DEFAULT_TENANT, TenantFile, TenantLimits, TenantSpec


class AuthConfigError(ValueError):
    """The configured key file cannot be read or is malformed; the message names the file
    and the problem (never a key)."""


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant as the request path sees it (no keys)."""

    name: str
    weight: float = 1.0
    priority: int = 0
    limits: TenantLimits = field(default_factory=TenantLimits)


def key_digest(key: str) -> str:
    """The lowercase hex SHA-256 of a key (what the directory keeps)."""
    return hashlib.sha256(key.encode()).hexdigest()


class TenantDirectory:
    """Key digests → tenants. Empty: the API is open (every request is the default tenant)."""

    def __init__(
        self,
        by_digest: Mapping[str, Tenant],
        default: Tenant | None = None,
        protect_metrics: bool = False,
    ):
        self._by_digest = dict(by_digest)
        self.default = default or Tenant(DEFAULT_TENANT)
        self.protect_metrics = protect_metrics
        names = {t.name: t for t in self._by_digest.values()}
        names.setdefault(self.default.name, self.default)
        self.tenants: tuple[Tenant, ...] = tuple(sorted(names.values(), key=lambda t: t.name))
        """Every tenant (the default one too), by name: the only label values of metrics."""

    @classmethod
    def load(cls, config: AuthConfig, environ: Mapping[str, str]) -> TenantDirectory:
        specs: list[TenantSpec] = []
        if config.api_key_file is not None:
            specs = _read_key_file(pathlib.Path(config.api_key_file).expanduser())
        default_spec = next((s for s in specs if s.name == DEFAULT_TENANT), None)
        default = _tenant(default_spec) if default_spec else Tenant(DEFAULT_TENANT)
        by_digest: dict[str, Tenant] = {}
        owner: dict[str, str] = {}

        def add(digest: str, tenant: Tenant) -> None:
            if owner.setdefault(digest, tenant.name) != tenant.name:
                where = config.api_key_file or config.api_key_env
                raise AuthConfigError(
                    f"router.auth ({where}): one API key is given to two tenants: "
                    f"{owner[digest]} and {tenant.name}"
                )
            by_digest[digest] = tenant

        for spec in specs:
            tenant = default if spec is default_spec else _tenant(spec)
            for key in spec.keys:
                add(key_digest(key), tenant)
            for digest in spec.key_sha256:
                add(digest, tenant)
        for key in environ.get(config.api_key_env, "").split(","):
            if key.strip():
                add(key_digest(key.strip()), default)
        return cls(by_digest, default, config.protect_metrics)

    @property
    def shared(self) -> bool:
        """More than one tenant has keys: there is something to share fairly."""
        return len({t.name for t in self._by_digest.values()}) > 1

    @property
    def enabled(self) -> bool:
        """Whether any key is configured (else the API is open)."""
        return bool(self._by_digest)

    def resolve(self, authorization: str | None) -> Tenant | None:
        """The tenant whose key the Authorization header carries; the default tenant on an
        open API; None for a missing, malformed or unknown key."""
        if not self._by_digest:
            return self.default
        if authorization is None:
            return None
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        return self._by_digest.get(key_digest(token))

    def accepts(self, authorization: str | None) -> bool:
        return self.resolve(authorization) is not None

    def guards(self, path: str) -> bool:
        """Whether `path` needs a key."""
        if not self._by_digest:
            return False
        return path.startswith("/v1/") or (self.protect_metrics and path == "/metrics")


def _tenant(spec: TenantSpec) -> Tenant:
    return Tenant(spec.name, spec.weight, spec.priority, spec.limits)


def _read_key_file(path: pathlib.Path) -> list[TenantSpec]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AuthConfigError(
            f"router.auth.api_key_file {path} cannot be read: {exc.strerror}"
        ) from exc
    lines = [ln.strip() for ln in text.splitlines()]
    keys = [ln for ln in lines if ln and not ln.startswith("#")]
    if not any(ln.startswith("tenants:") for ln in keys):
        # Today's plain list: each key its own default-weight tenant.
        return [TenantSpec(name=f"key-{key_digest(k)[:8]}", keys=[k]) for k in keys]
    try:
        doc = yaml.safe_load(text)
        return TenantFile.model_validate(doc).tenants
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise AuthConfigError(f"router.auth.api_key_file {path} is not valid YAML{at}") from None
    except ValidationError as exc:
        # Never echo the input: a key may be in it.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise AuthConfigError(f"router.auth.api_key_file {path}: {problems}") from None

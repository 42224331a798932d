"""API keys: which keys the router accepts, and the ASGI middleware that enforces them.

`ApiKeys.load(config, environ)` runs once per router replica (keys are read at start: rotate
by restarting the router). `ApiKeyMiddleware` checks every HTTP request before its body is
read: routes under /v1/ (and /metrics when `protect_metrics`) need `Authorization: Bearer
<key>` when any key is configured; /health and /ready never do. Keys never appear in logs,
metrics or error bodies.
"""

from __future__ import annotations

import hmac
import pathlib
from collections.abc import Mapping
from typing import Any

from pdserve.config import AuthConfig
from pdserve.router.errors import send_error

CLIENT_KEY_ENV = "PDSERVE_API_KEY"
"""Where pdserve's own clients (`pdserve bench`, `profile`, `top`) find the key to send."""


def client_headers(environ: Mapping[str, str]) -> dict[str, str]:
    """The Authorization header pdserve's own clients send: the first key in
    PDSERVE_API_KEY (the router's default key variable), or none when it is unset."""
    keys = [k.strip() for k in environ.get(CLIENT_KEY_ENV, "").split(",") if k.strip()]
    return {"authorization": f"Bearer {keys[0]}"} if keys else {}


class AuthConfigError(ValueError):
    """The configured key file cannot be read; the message names it (never a key)."""


class ApiKeys:
    """The accepted keys (an empty set: the API is open)."""

    def __init__(self, keys: frozenset[str], protect_metrics: bool = False):
        self._keys = tuple(k.encode() for k in sorted(keys))
        self.protect_metrics = protect_metrics

    @classmethod
    def load(cls, config: AuthConfig, environ: Mapping[str, str]) -> ApiKeys:
        keys = {k.strip() for k in environ.get(config.api_key_env, "").split(",")}
        if config.api_key_file is not None:
            path = pathlib.Path(config.api_key_file).expanduser()
            try:
                lines = path.read_text().splitlines()
            except OSError as exc:
                raise AuthConfigError(
                    f"router.auth.api_key_file {path} cannot be read: {exc.strerror}"
                ) from exc
            keys |= {ln.strip() for ln in lines if not ln.strip().startswith("#")}
        keys.discard("")
        return cls(frozenset(keys), config.protect_metrics)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def accepts(self, authorization: str | None) -> bool:
        """Whether an Authorization header value carries an accepted key. Compares in constant
        time against every key (no early exit that would leak which prefix matched)."""
        if not self._keys:
            return True
        if authorization is None:
            return False
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        candidate = token.strip().encode()
        ok = False
        for key in self._keys:
            ok |= hmac.compare_digest(candidate, key)
        return ok

    def guards(self, path: str) -> bool:
        """Whether `path` needs a key."""
        if not self._keys:
            return False
        return path.startswith("/v1/") or (self.protect_metrics and path == "/metrics")


class ApiKeyMiddleware:
    """Pure ASGI: answers 401 (OpenAI format, code invalid_api_key) before the app runs."""

    def __init__(self, app: Any, keys: ApiKeys):
        self._app = app
        self._keys = keys

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self._keys.guards(scope["path"]):
            header = None
            for name, value in scope["headers"]:
                if name == b"authorization":
                    header = value.decode("latin-1")
                    break
            if not self._keys.accepts(header):
                missing = header is None
                message = (
                    "Missing API key: send 'Authorization: Bearer <key>'."
                    if missing
                    else "Invalid API key, or a malformed Authorization header "
                    "(expected 'Bearer <key>')."
                )
                extra = ((b"www-authenticate", b"Bearer"),)
                await send_error(send, 401, message, "invalid_api_key", extra)
                return
        await self._app(scope, receive, send)

"""OpenAI-format errors: `{"error": {"message", "type", "param", "code"}}` for every 4xx/5xx.

`install_error_handlers(app)` makes FastAPI answer validation failures, malformed JSON and
`OpenAIError` in that format; the app factory calls it once.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("pdserve.router")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


class OpenAIError(Exception):
    """An error answered to the client in OpenAI format."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}
        """Extra response headers (e.g. Retry-After on a 429)."""


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error body."""
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(
                status, "server_error" if status >= 500 else "invalid_request_error"
            ),
            "param": param,
            "code": code,
        }
    }


REQUEST_ID_STATE = "pdserve_request_id"
"""`request.state` attribute where the HTTP layer keeps the request's id for error bodies."""
FAILURE_STATE = "pdserve_failure_point"
"""`request.state` attribute where the HTTP layer keeps where the request failed, if known."""

# failure point -> (status, code, what failed). A pool replica that failed is an upstream
# failure (502); anything else is the router's own (500).
_SERVER_FAILURES = {
    "placement": (500, "placement_failed", "placing the request failed"),
    "prefill": (502, "prefill_failed", "the prefill failed"),
    "decode_before_first_token": (502, "decode_failed", "the decode failed before the first token"),
    "decode_after_first_token": (502, "decode_failed", "the decode failed mid-stream"),
}
_INTERNAL = (500, "internal_error", "internal error")


def server_error_status(failure_point: str | None) -> int:
    """502 when a pool replica failed the request (prefill, decode), else 500."""
    return _SERVER_FAILURES.get(failure_point or "", _INTERNAL)[0]


def server_error_body(request_id: str | None, failure_point: str | None) -> dict[str, Any]:
    """The body of a 5xx: a stable code and the request id, never the exception's text
    (remote tracebacks carry process titles, pids and addresses; the log has them)."""
    status, code, what = _SERVER_FAILURES.get(failure_point or "", _INTERNAL)
    rid = f" (request {request_id})" if request_id else ""
    return error_body(status, f"{what}{rid}; the router log has the details", None, code)


async def send_error(
    send: Any,
    status: int,
    message: str,
    code: str,
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Answer with an OpenAI error body straight from ASGI middleware (before the app runs)."""
    body = json.dumps(error_body(status, message, None, code)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def error_response(exc: OpenAIError) -> JSONResponse:
    body = error_body(exc.status, exc.message, exc.param, exc.code)
    return JSONResponse(body, exc.status, headers=exc.headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request body", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return f"request body is not valid JSON: {first.get('ctx', {}).get('error', '')}", None
    if first.get("type") == "model_attributes_type" and not loc:
        return "request body must be a JSON object (send Content-Type: application/json)", None
    msg = first.get("msg", "invalid value")
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    where = f"'{param}': " if param else ""
    return f"{where}{msg}{more}", param


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error in OpenAI format."""

    @app.exception_handler(OpenAIError)
    async def _openai(_: Request, exc: OpenAIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return JSONResponse(error_body(400, message, param, "invalid_request"), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        rid = getattr(request.state, REQUEST_ID_STATE, None)
        point = getattr(request.state, FAILURE_STATE, None)
        if point is None:  # not logged where it happened
            log.error("request %s failed: %r", rid, exc, exc_info=exc)
        return JSONResponse(server_error_body(rid, point), server_error_status(point))

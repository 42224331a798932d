"""The floor's P/D proxy: as little as an OpenAI-compatible P/D front can do (aiohttp).

    python -m pdserve.bench.peers.proxy --port 8302 --prefill URL --decode URL

Per completion or chat request: send it to the prefill server with `max_tokens=1`, no stream
and `kv_transfer_params.do_remote_decode=true`; take the `kv_transfer_params` it returns; send
the original request with them to the decode server and relay its bytes (SSE or JSON) as
they come. No validation, no tokenization, no retries. `GET /v1/models` goes to decode.
"""

from __future__ import annotations

import argparse
from typing import Any

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

PREFILL_KV_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The prefill leg of a request: one token, not streamed, KV kept for the decode side."""
    out = {k: v for k, v in body.items() if k != "stream_options"}
    out.update(stream=False, max_tokens=1, kv_transfer_params=PREFILL_KV_PARAMS)
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    return out


def make_app(prefill: str, decode: str) -> web.Application:
    """The proxy's aiohttp application."""
    app = web.Application()

    async def on_startup(app: web.Application) -> None:
        app["http"] = ClientSession(
            connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None)
        )

    async def on_cleanup(app: web.Application) -> None:
        await app["http"].close()

    async def generate(request: web.Request) -> web.StreamResponse:
        http: ClientSession = request.app["http"]
        body = await request.json()
        async with http.post(prefill + request.path, json=prefill_body(body)) as resp:
            if resp.status != 200:
                return web.Response(
                    status=resp.status, body=await resp.read(), content_type="application/json"
                )
            body["kv_transfer_params"] = (await resp.json()).get("kv_transfer_params")
        async with http.post(decode + request.path, json=body) as resp:
            out = web.StreamResponse(status=resp.status)
            out.content_type = resp.content_type
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    async def models(request: web.Request) -> web.Response:
        async with request.app["http"].get(decode + "/v1/models") as resp:
            return web.Response(
                status=resp.status, body=await resp.read(), content_type="application/json"
            )

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--prefill", required=True, help="prefill server base URL")
    parser.add_argument("--decode", required=True, help="decode server base URL")
    args = parser.parse_args()
    app = make_app(args.prefill.rstrip("/"), args.decode.rstrip("/"))
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()

"""The Ray Serve config file (serveConfigV2) for a pdserve config (pure).

One source of truth: the application args are the pdserve config itself, so `serve run`,
`pdserve up` and the Helm chart deploy the same thing.
"""

from __future__ import annotations

from typing import Any

from pdserve.config import PdserveConfig


def serve_config_for(config: PdserveConfig) -> dict[str, Any]:
    """A Ray Serve config with one application built by pdserve.deploy.app:build_app."""
    return {
        "http_options": {"host": config.router.host, "port": config.router.port},
        "applications": [
            {
                "name": config.app_name,
                "route_prefix": "/",
                "import_path": "pdserve.deploy.app:build_app",
                "args": config.model_dump(mode="json"),
            }
        ],
    }

"""Resolve the configured model to something vLLM and the tokenizer can load."""

from __future__ import annotations

import pathlib

from pdserve.config import ModelConfig


def resolve_model(model: ModelConfig) -> str:
    """A local folder path (creating the demo model when source is 'demo') or a hub id.

    Called once per process that needs the model (router and engine replicas); creating the
    demo model is idempotent and atomic, so concurrent callers are safe.
    """
    if model.source == "demo":
        from pdserve.demo_model import create_demo_model

        return str(create_demo_model(pathlib.Path(model.demo_model_dir).expanduser()))
    path = pathlib.Path(model.source).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"model folder {path} has no config.json; point model.source at a Hugging "
                "Face model folder"
            )
        return str(path.resolve())
    return model.source  # a hub id; vLLM and transformers fetch it where there is internet

"""`StrictModel`: the one base of the deployment config's models (pydantic v2).

`extra="forbid"` turns a misspelt YAML key into an error naming it; `frozen=True` makes a
validated config immutable, so it can be shared across components without copies. Lives in
the pure policy package because both the policy config (config.py) and `pdserve.config`,
which imports the policy config, build on it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of config models: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

"""Fault hooks for the KV-integrity tests: off unless the process's environment names a file.

`PDSERVE_FAULTS_FILE=/path` (set when a test cluster starts) makes the hooks read that file;
each line of it that names a fault turns that fault on until the test rewrites the file:
- `corrupt_kv`: a prefill engine overwrites a verified request's KV blocks after digesting
  them, before any decode engine can pull them (pdserve.kv_transfer.verified_worker);
- `swap_handoffs`: the router swaps the handoffs of two requests prefilled at about the same
  time (pdserve.router.fault_hooks).
Without the variable, `FaultSwitch.on()` is always False and reads nothing. Never set it in a
deployment.
"""

from __future__ import annotations

import os
import pathlib

FAULTS_FILE_ENV = "PDSERVE_FAULTS_FILE"


class FaultSwitch:
    """Whether a named fault is on: reads the (small) file on every call, and only where
    the variable is set (tests)."""

    def __init__(self, path: str | None):
        self._path = pathlib.Path(path) if path else None

    @classmethod
    def from_env(cls) -> FaultSwitch:
        return cls(os.environ.get(FAULTS_FILE_ENV) or None)

    @property
    def armed(self) -> bool:
        """Whether a fault file is configured at all."""
        return self._path is not None

    def on(self, fault: str) -> bool:
        if self._path is None:
            return False
        try:
            text = self._path.read_text()
        except OSError:
            return False
        return fault in (line.strip() for line in text.splitlines())

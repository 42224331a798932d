"""Which product packages may import which (an AST scan of the source files, no imports run).

The shared names (`pdserve.names`) and the router <-> engine messages (`pdserve.messages`) are
the neutral ground; the router's policy package is the router's own, and the engine host sits
below the router, the profiler, the benchmarks and the simulator. Each rule names the files it
covers and the modules they must not import; a violation names the file, line and import.

The scan sees direct imports only. Known and accepted: every layer reads the deployment config
(pdserve.config), whose `router:` block is the router's own config (pdserve.router_config, with
the routing policy's PolicyConfig and cost model, which the engines also use to price their
queued prefills) and whose models derive from pdserve.router.policy.strict.StrictModel.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

PACKAGE_DIRS = {
    "pdserve": "pdserve",
    "router": "pdserve.router",
    "prefill_pool": "pdserve.prefill_pool",
    "decode_pool": "pdserve.decode_pool",
    "kv_transfer": "pdserve.kv_transfer",
    "deploy": "pdserve.deploy",
    "bench": "pdserve.bench",
}
"""Top-level source folder -> its import name (pyproject's package-dir)."""


@dataclass(frozen=True)
class Rule:
    name: str
    covers: tuple[str, ...]
    """Source folders (relative to the repository root) whose files the rule checks."""
    forbidden: tuple[str, ...]
    """Modules (and everything under them) those files must not import."""
    why: str
    exempt: tuple[str, ...] = ()
    """Folders inside `covers` that the rule skips."""


RULES = (
    Rule(
        "policy types stay the router's",
        covers=tuple(PACKAGE_DIRS),
        exempt=("router",),
        forbidden=("pdserve.router.policy.types",),
        why="import PoolName/POOLS/PolicyName from pdserve.names; the policy's data types from "
        "the pdserve.router.policy package",
    ),
    Rule(
        "the engine host sits below router, profiler, benchmarks and simulator",
        covers=("pdserve/engine",),
        forbidden=("pdserve.router", "pdserve.profiling", "pdserve.bench", "pdserve.sim"),
        why="shared names live in pdserve.names, the stats the engine reports in pdserve.messages",
    ),
    Rule(
        "pools and KV transfer do not import the router",
        covers=("prefill_pool", "decode_pool", "kv_transfer"),
        forbidden=("pdserve.router",),
        why="shared names live in pdserve.names, router <-> engine messages in pdserve.messages",
    ),
)


def module_name(path: pathlib.Path) -> str:
    """The import name of a source file (`router/app.py` -> `pdserve.router.app`)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    parts[0] = PACKAGE_DIRS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) for every import in `source`, function-level ones included. `from A
    import B` yields `A.B` (B may be a submodule); relative imports are resolved against
    `module`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                if not is_package:
                    package.pop()
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def violations(rule: Rule, path: pathlib.Path, source: str) -> list[str]:
    module = module_name(path)
    rel = path.relative_to(ROOT)
    return [
        f"{rel}:{line} imports {name} ({rule.name}: {rule.why})"
        for line, name in imported_modules(source, module, path.name == "__init__.py")
        if any(name == bad or name.startswith(bad + ".") for bad in rule.forbidden)
    ]


def files_of(rule: Rule) -> list[pathlib.Path]:
    files = []
    for folder in rule.covers:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not any(rel.startswith(ex + "/") for ex in rule.exempt):
                files.append(path)
    return files


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_layering(rule: Rule) -> None:
    files = files_of(rule)
    assert files, f"rule {rule.name!r} covers no source files: are its folders right?"
    found = [v for path in files for v in violations(rule, path, path.read_text())]
    assert not found, "imports across layers:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("path", "source", "rule"),
    [
        ("bench/x.py", "from pdserve.router.policy.types import PoolName", RULES[0]),
        ("pdserve/x.py", "from pdserve.router.policy import types", RULES[0]),
        ("pdserve/x.py", "import pdserve.router.policy.types as t", RULES[0]),
        ("pdserve/engine/x.py", "def f():\n    from pdserve.profiling.plan import X", RULES[1]),
        ("pdserve/engine/x.py", "from pdserve.router.metric_catalog import A", RULES[1]),
        ("pdserve/engine/x.py", "from ..sim import layout", RULES[1]),
        ("pdserve/engine/x.py", "from pdserve import bench", RULES[1]),
        ("decode_pool/x.py", "from pdserve.router.headers import H", RULES[2]),
        ("kv_transfer/x.py", "import pdserve.router", RULES[2]),
    ],
)
def test_scan_finds(path: str, source: str, rule: Rule) -> None:
    """Each way of spelling a forbidden import is caught (the scan can fail)."""
    found = violations(rule, ROOT / path, source)
    assert len(found) == 1 and found[0].startswith(f"{path}:"), found


@pytest.mark.parametrize(
    ("path", "source", "rule"),
    [
        ("bench/x.py", "from pdserve.names import PoolName", RULES[0]),
        ("pdserve/x.py", "from pdserve.router.policy import Decision", RULES[0]),
        ("pdserve/engine/x.py", "from pdserve.messages import EngineStats", RULES[1]),
        ("pdserve/engine/x.py", "from .warmup import TOKEN_ID_RANGE", RULES[1]),
        ("pdserve/engine/x.py", "import pdserve.routerless", RULES[1]),
    ],
)
def test_scan_allows(path: str, source: str, rule: Rule) -> None:
    assert violations(rule, ROOT / path, source) == []

"""Which UCX transports carry the data: parse UCX's own log (pure).

The initiator runs with `UCX_LOG_LEVEL=info UCX_PROTO_INFO=y UCX_LOG_FILE=...` (see
`detection_env`). UCX then logs, per endpoint configuration, its lanes:

    ucp_worker.c:1997 UCX  INFO    init intra-node cfg#1 rma_am(tcp/lo)  am(tcp/lo cma/memory)

and, the first time each operation is used, the protocol it selected per message-size range:

    | init intra-node cfg#1                                            |
    | remote memory read by ucp_get*(multi) into host memory from host |
    | 0..inf | zero-copy   | cma/memory                                |

The protocol tables are what UCX actually selected for a READ (`ucp_get`) or WRITE
(`ucp_put`), so they are the primary source ("ucx-proto-info"). Without them (UCX_PROTO_ENABLE=n,
older UCX) the endpoint lanes are the fallback ("ucx-endpoint-lanes"): they list every
transport the endpoint may use, control traffic included, so that answer is a heuristic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SOURCE_PROTO_INFO = "ucx-proto-info"
SOURCE_ENDPOINT_LANES = "ucx-endpoint-lanes"
SOURCE_NONE = "none"
SELF_SCOPE = "self"  # an agent's loopback endpoint to itself: never the fabric under test
OPERATION_MARKERS = {"READ": "ucp_get", "WRITE": "ucp_put"}

_PREFIX_RE = re.compile(r"^\[[^\]]*\]\s*\[[^\]]*\]\s?")
_VERSION_RE = re.compile(r"UCX\s+INFO\s+Version\s+(\S+)")
_ENV_RE = re.compile(r"UCX\s+INFO\s+UCX_\* env variables:\s*(.*)$")
_EP_RE = re.compile(
    r"UCX\s+INFO\s+(?P<worker>\S+) (?P<scope>[\w-]+) cfg#(?P<cfg>\d+)\s+(?P<lanes>.*)$"
)
_EP_V1_RE = re.compile(r"UCX\s+INFO\s+ep_cfg\[(?P<cfg>\d+)\]:\s+(?P<lanes>.*)$")
_LANE_RE = re.compile(r"(\w+)\(([^)]*)\)")
_TITLE_RE = re.compile(r"^\|\s*(?P<worker>\S+) (?P<scope>[\w-]+) cfg#(?P<cfg>\d+)\s*\|$")
_TRANSPORT_RE = re.compile(r"\b([a-z][a-z0-9_]*/[\w:.\-]+)")
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_BOUND_RE = re.compile(r"^(\d+)([KMGT]?)B?$")


@dataclass(frozen=True)
class EndpointConfig:
    """One endpoint configuration line: lane type -> transports ("tl/device")."""

    worker: str | None  # the UCP worker (NIXL names it after the agent); None in old formats
    scope: str | None  # "self", "intra-node", "inter-node"; None in old formats
    cfg_index: int
    lanes: tuple[tuple[str, tuple[str, ...]], ...]

    def transports(self) -> tuple[str, ...]:
        return tuple(sorted({t for _, ts in self.lanes for t in ts}))


@dataclass(frozen=True)
class ProtoRow:
    """Message sizes min_bytes..max_bytes (None = unbounded) go over `transports`."""

    min_bytes: int
    max_bytes: int | None
    description: str
    transports: tuple[str, ...]

    def covers(self, num_bytes: int) -> bool:
        above_min = self.min_bytes <= num_bytes
        return above_min and (self.max_bytes is None or num_bytes <= self.max_bytes)


@dataclass(frozen=True)
class ProtoTable:
    """One UCX_PROTO_INFO table: the protocols selected for one operation on one endpoint."""

    worker: str
    scope: str
    cfg_index: int
    operation: str
    rows: tuple[ProtoRow, ...]


@dataclass(frozen=True)
class UcxLog:
    """What `parse_ucx_log` found; every field is empty when UCX logged nothing useful."""

    version: str | None
    env: tuple[str, ...]
    endpoints: tuple[EndpointConfig, ...]
    tables: tuple[ProtoTable, ...]


def transports_in(text: str) -> tuple[str, ...]:
    """The "tl/device" tokens of a config cell, e.g. "52% on tcp/lo and 48% on tcp/eth0"."""
    return tuple(dict.fromkeys(_TRANSPORT_RE.findall(text)))


def parse_range(text: str) -> tuple[int, int | None]:
    """A UCX size range in bytes: "0..inf" -> (0, None), "1..16515" -> (1, 16515),
    "8K..inf" -> (8192, None), "0" -> (0, 0). Raises ValueError."""
    low, _, high = text.strip().partition("..")
    bounds: list[int | None] = []
    for part in (low, high or low):
        part = part.strip()
        if part == "inf":
            bounds.append(None)
            continue
        match = _BOUND_RE.match(part)
        if match is None:
            raise ValueError(f"cannot parse UCX size range {text!r}")
        bounds.append(int(match.group(1)) * _UNITS[match.group(2)])
    if bounds[0] is None:
        raise ValueError(f"UCX size range {text!r} has no lower bound")
    return bounds[0], bounds[1]


def _parse_lanes(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((name, transports_in(body)) for name, body in _LANE_RE.findall(text))


def parse_ucx_log(text: str) -> UcxLog:
    """Parse a UCX log (any mix of lines; unknown lines are ignored)."""
    version: str | None = None
    env: tuple[str, ...] = ()
    endpoints: list[EndpointConfig] = []
    tables: list[ProtoTable] = []
    head: tuple[str, str, int] | None = None  # title of the table being read
    operation: str | None = None
    rows: list[ProtoRow] = []

    def close_table() -> None:
        nonlocal head, operation, rows
        if head is not None and operation is not None and rows:
            tables.append(ProtoTable(head[0], head[1], head[2], operation, tuple(rows)))
        head, operation, rows = None, None, []

    for raw in text.splitlines():
        line = _PREFIX_RE.sub("", raw).strip()
        if m := _VERSION_RE.search(line):
            version = m.group(1)
        elif m := _ENV_RE.search(line):
            env = tuple(m.group(1).split())
        elif m := _EP_RE.search(line):
            lanes = _parse_lanes(m.group("lanes"))
            worker, scope = m.group("worker"), m.group("scope")
            endpoints.append(EndpointConfig(worker, scope, int(m.group("cfg")), lanes))
        elif m := _EP_V1_RE.search(line):
            lanes = _parse_lanes(m.group("lanes"))
            endpoints.append(EndpointConfig(None, None, int(m.group("cfg")), lanes))
        elif m := _TITLE_RE.match(line):
            close_table()
            head = (m.group("worker"), m.group("scope"), int(m.group("cfg")))
        elif head is not None and line.startswith("|") and line.endswith("|"):
            cells = [c.strip() for c in line[1:-1].split("|")]
            if len(cells) == 1 and operation is None:
                operation = cells[0]
            elif len(cells) >= 3 and cells[0] != "Range" and operation is not None:
                low, high = parse_range(cells[0])
                rows.append(ProtoRow(low, high, " ".join(cells[1:-1]), transports_in(cells[-1])))
        elif head is not None and not line.startswith("+"):
            close_table()
    close_table()
    return UcxLog(version, env, tuple(endpoints), tuple(tables))


def _same_worker(logged: str, worker: str) -> bool:
    """UCX truncates worker names (to 31 characters in UCX 1.23): compare the logged prefix."""
    return bool(logged) and worker.startswith(logged)


def data_path_transports(log: UcxLog, worker: str, op: str, num_bytes: int) -> tuple[str, ...]:
    """Transports UCX selected for `op` ("READ"/"WRITE") of `num_bytes` on `worker`'s endpoints
    to other agents (self endpoints excluded); empty when no matching table was logged."""
    marker = OPERATION_MARKERS[op]
    found: dict[str, None] = {}
    for table in log.tables:
        mine = _same_worker(table.worker, worker)
        if not mine or table.scope == SELF_SCOPE or marker not in table.operation:
            continue
        for row in table.rows:
            if row.covers(num_bytes):
                found.update(dict.fromkeys(row.transports))
    return tuple(sorted(found))


def endpoint_transports(log: UcxLog, worker: str) -> tuple[str, ...]:
    """Every transport on `worker`'s endpoints to other agents (old formats: all endpoints)."""
    found: set[str] = set()
    for ep in log.endpoints:
        if ep.scope == SELF_SCOPE or (
            ep.worker is not None and not _same_worker(ep.worker, worker)
        ):
            continue
        found.update(ep.transports())
    return tuple(sorted(found))


def detection_env(log_path: str, current: dict[str, str]) -> dict[str, str]:
    """UCX variables to set before UCX loads so that it logs what it selects into `log_path`.

    `current` is the environment now: a user's own UCX_LOG_LEVEL is kept when it is already at
    least as verbose as "info"; UCX_LOG_FILE and UCX_PROTO_INFO are always set.
    """
    verbose = {"info", "debug", "trace", "req", "data", "async", "func", "poll"}
    level = current.get("UCX_LOG_LEVEL", "").lower()
    return {
        "UCX_LOG_LEVEL": level if level in verbose else "info",
        "UCX_PROTO_INFO": "y",
        "UCX_LOG_FILE": log_path,
    }

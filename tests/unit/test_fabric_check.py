"""`pdserve kv-check`'s pure parts (sizes, statistics, UCX log parsing, fabric verdict, report,
wire messages); no NIXL here: tests/integration/test_kv_check.py runs the real thing."""

from __future__ import annotations

import socket

import pytest

from pdserve.kv_transfer.fabric_check import transports as tp
from pdserve.kv_transfer.fabric_check import units, wire
from pdserve.kv_transfer.fabric_check.buffers import HostBuffer, time_memcpy
from pdserve.kv_transfer.fabric_check.fabric import classify, evaluate
from pdserve.kv_transfer.fabric_check.render import format_seconds, report_table
from pdserve.kv_transfer.fabric_check.report import Report, build_row, to_json
from pdserve.kv_transfer.fabric_check.runner import CheckOptions
from pdserve.kv_transfer.fabric_check.stats import TimingSummary, percentile, summarize
from pdserve.kv_transfer.fabric_check.units import SizeError, format_size

DEFAULTS = units.DEFAULT_SIZES_BYTES

K, M = 1024, 1024 * 1024
ME = "kvc-initiator-3cfcf82b"

# Excerpts of real initiator logs from this machine (UCX 1.23.0, two processes on one node).
CMA_LOG = f"""\
[1796059703.1] [vm:11735:0]     ucp_context.c:2753 UCX  INFO  Version 1.23.0 (loaded from x)
[1796059703.2] [vm:11735:0]          parser.c:2587 UCX  INFO  UCX_* env variables: \
UCX_LOG_LEVEL=info UCX_PROTO_INFO=y
[1796059703.3] [vm:11735:0]      ucp_worker.c:1997 UCX  INFO    {ME} self cfg#0 \
rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo cma/memory)  ka(tcp/lo)
[1796059703.4] [vm:11735:0]   +--------+-------------+-----------------------------------+
[1796059703.4] [vm:11735:0]   | {ME} self cfg#0                        |
[1796059703.4] [vm:11735:0]   | remote memory read by ucp_get* into host memory from host |
[1796059703.4] [vm:11735:0]   | Range  | Description |              Config               |
[1796059703.4] [vm:11735:0]   | 0..inf | zero-copy   | self/memory                       |
[1796059703.7] [vm:11735:0]      ucp_worker.c:1997 UCX  INFO    {ME} intra-node cfg#1 \
rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo cma/memory)  ka(tcp/lo)
[1796059703.8] [vm:11735:0]   | {ME} intra-node cfg#1         |
[1796059703.8] [vm:11735:0]   | active message by ucp_am_send* from host memory |
[1796059703.8] [vm:11735:0]   |   Range    |    Description     |    Config     |
[1796059703.8] [vm:11735:0]   | 16516..inf | multi-frag copy-in | tcp/lo        |
[1796059703.9] [vm:11735:0]   +--------+-------------+-------------------------------------------+
[1796059703.9] [vm:11735:0]   | {ME} intra-node cfg#1                          |
[1796059703.9] [vm:11735:0]   | remote memory read by ucp_get*(multi) into host memory from host |
[1796059703.9] [vm:11735:0]   +--------+-------------+-------------------------------------------+
[1796059703.9] [vm:11735:0]   | Range  | Description |                  Config                   |
[1796059703.9] [vm:11735:0]   +--------+-------------+-------------------------------------------+
[1796059703.9] [vm:11735:0]   | 0..inf | zero-copy   | cma/memory                                |
[1796059703.9] [vm:11735:0]   +--------+-------------+-------------------------------------------+
"""
# The same with UCX_TLS=tcp: READ is emulated over TCP (the silent-fallback signature).
TCP_LOG = f"""\
[1.1] [vm:5371 :0]      ucp_worker.c:1997 UCX  INFO    {ME} intra-node cfg#1 \
rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo tcp/eth0)  ka(tcp/lo)
[1.2] [vm:5371 :0]   | {ME} intra-node cfg#1                                            |
[1.2] [vm:5371 :0]   | remote memory read by ucp_get*(multi) into host memory from host |
[1.2] [vm:5371 :0]   +--------+--------------------+------------------------------------+
[1.2] [vm:5371 :0]   | Range  |    Description     |               Config               |
[1.2] [vm:5371 :0]   | 0..inf | software emulation | tcp/lo                             |
[1.2] [vm:5371 :0]   +--------+--------------------+------------------------------------+
[1.3] [vm:5371 :0]   | {ME} intra-node cfg#1                                           |
[1.3] [vm:5371 :0]   | remote memory write by ucp_put*(multi) from host memory to host |
[1.3] [vm:5371 :0]   | Range  | Description |                  Config                  |
[1.3] [vm:5371 :0]   | 0..inf | zero-copy   | 52% on tcp/lo and 48% on tcp/eth0        |
"""
# Written in UCX's format (not captured here: no GPU/RDMA): a size-split GPU READ between nodes.
RDMA_LOG = f"""\
[2.1] [gpu1:77:0]   | {ME} inter-node cfg#2                                            |
[2.1] [gpu1:77:0]   | remote memory read by ucp_get* into cuda memory from cuda |
[2.1] [gpu1:77:0]   | Range     | Description | Config                                  |
[2.1] [gpu1:77:0]   | 0..8K     | copy-out    | cuda_copy/cuda                          |
[2.1] [g:7:0] | 8193..inf | zero-copy | 50% on rc_mlx5/mlx5_0:1 and 50% on rc_mlx5/mlx5_1:1 |
"""
OLD_FORMAT_LOG = "[3] [h:1:0] x.c:1 UCX  INFO  ep_cfg[1]: tag(rc_mlx5/mlx5_0:1) am(tcp/ib0)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("4K", 4 * K), ("4KiB", 4 * K), ("4kb", 4 * K), (" 16M ", 16 * M),
     ("256MiB", 256 * M), ("1G", 1024 * M), ("1000", 1000), ("", None), ("abc", None),
     ("0", None), ("-1K", None), ("4X", None), ("5G", None), ("1.5M", None)],
)  # fmt: skip
def test_parse_size(text: str, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(SizeError):
            units.parse_size(text)
    else:
        assert units.parse_size(text) == expected


def test_sizes_default_cap_list_and_auto_iterations() -> None:
    assert " ".join(format_size(s) for s in DEFAULTS) == "4K 16K 64K 256K 1M 4M 16M 64M 256M"
    assert units.cap_sizes(DEFAULTS, 16 * M)[-1] == 16 * M
    assert units.parse_sizes("1M, 4K,4K") == (4 * K, M) and format_size(1000) == "1000B"
    for bad in (lambda: units.cap_sizes(DEFAULTS, K), lambda: units.parse_sizes(" , ")):
        with pytest.raises(SizeError):
            bad()
    # fewer timed iterations for big sizes: 100 up to 1M, then ~256 MiB per size, at least 10
    assert [units.auto_iterations(s) for s in DEFAULTS] == [100] * 5 + [64, 16, 10, 10]


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([1.0, 2.0, 3.0, 4.0], 50, 2.5), ([1.0, 2.0, 3.0, 4.0], 99, 3.97), ([5.0], 99, 5.0),
     ([3.0, 1.0, 2.0], 0, 1.0), ([3.0, 1.0, 2.0], 100, 3.0), ([], 50, None), ([1.0], -1, None),
     ([1.0], 101, None)],
)  # fmt: skip
def test_percentile_like_numpy_linear(
    values: list[float], q: float, expected: float | None
) -> None:
    if expected is None:
        with pytest.raises(ValueError):
            percentile(values, q)
    else:
        assert percentile(values, q) == pytest.approx(expected)


def test_summarize_uses_median_bandwidth_and_rejects_zero_time() -> None:
    summary = summarize(10**9, [1.0, 2.0, 4.0])
    assert (summary.latency_p50_s, summary.num_samples) == (2.0, 3)
    assert (summary.latency_p99_s, summary.bandwidth_gbps) == pytest.approx((3.96, 0.5))
    for bad in ([], [0.0, 1.0]):
        with pytest.raises(ValueError):
            summarize(4096, bad)


@pytest.mark.parametrize(
    ("cell", "bounds", "transports"),
    [("0..inf", (0, None), ()), ("1..16515", (1, 16515), ()), ("8K..inf", (8192, None), ()),
     ("0", (0, 0), ()), ("1M..4M", (M, 4 * M), ()), ("cma/memory", None, ("cma/memory",)),
     ("52% on tcp/lo and 48% on tcp/eth0", None, ("tcp/lo", "tcp/eth0")),
     ("rc_mlx5/mlx5_0:1", None, ("rc_mlx5/mlx5_0:1",)), ("multi-frag copy-in", None, ())],
)  # fmt: skip
def test_ucx_table_cells(
    cell: str, bounds: tuple[int, int | None] | None, transports: tuple[str, ...]
) -> None:
    assert tp.transports_in(cell) == transports
    if bounds is not None:
        assert tp.parse_range(cell) == bounds


def test_cma_and_tcp_logs_report_what_reads_and_writes_use() -> None:
    log = tp.parse_ucx_log(CMA_LOG)
    assert (log.version, log.env) == ("1.23.0", ("UCX_LOG_LEVEL=info", "UCX_PROTO_INFO=y"))
    assert [(e.scope, e.cfg_index) for e in log.endpoints] == [("self", 0), ("intra-node", 1)]
    assert len(log.tables) == 3
    assert tp.data_path_transports(log, ME, "READ", 4 * K) == ("cma/memory",)
    assert tp.data_path_transports(log, ME, "WRITE", 4 * K) == ()  # not logged: not used
    assert tp.data_path_transports(log, "kvc-target-1", "READ", 4 * K) == ()
    assert tp.endpoint_transports(log, ME) == ("cma/memory", "tcp/lo")
    log = tp.parse_ucx_log(TCP_LOG)  # UCX_TLS=tcp: the silent-fallback signature
    assert tp.data_path_transports(log, ME, "READ", 256 * M) == ("tcp/lo",)
    assert tp.data_path_transports(log, ME, "WRITE", 4 * K) == ("tcp/eth0", "tcp/lo")
    assert log.tables[0].rows[0].description == "software emulation"


def test_size_split_rows_and_truncated_worker_names() -> None:
    log = tp.parse_ucx_log(RDMA_LOG)
    assert tp.data_path_transports(log, ME, "READ", 4 * K) == ("cuda_copy/cuda",)
    rdma = ("rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1")
    assert tp.data_path_transports(log, ME, "READ", 64 * M) == rdma
    # UCX cuts worker names at 31 characters; the logged prefix still identifies the agent.
    long_name = ME + "-and-a-much-longer-suffix"
    truncated = tp.parse_ucx_log(RDMA_LOG.replace(ME, long_name[:31]))
    assert tp.data_path_transports(truncated, long_name, "READ", 64 * M) == rdma


def test_old_format_lanes_are_a_flagged_heuristic_and_empty_logs_give_nothing() -> None:
    old = tp.parse_ucx_log(OLD_FORMAT_LOG)
    assert old.tables == () and tp.endpoint_transports(old, ME) == ("rc_mlx5/mlx5_0:1", "tcp/ib0")
    assert tp.parse_ucx_log("unrelated line\n") == tp.UcxLog(None, (), (), ())
    assert "heuristic" in evaluate("any", ["cma/memory"], heuristic=True).warnings[-1]
    with pytest.raises(ValueError):
        evaluate("infiniband", [], heuristic=False)


@pytest.mark.parametrize(
    ("transport", "fabric"),
    [("rc_mlx5/mlx5_0:1", "rdma"), ("ud_verbs/mlx5_0:1", "rdma"), ("dc_mlx5/mlx5_2:1", "rdma"),
     ("srd/rdmap0s6", "rdma"), ("cuda_ipc/cuda", "nvlink"), ("cma/memory", "shm"),
     ("posix/memory", "shm"), ("xpmem/memory", "shm"), ("tcp/eth0", "tcp"),
     ("cuda_copy/cuda", "gpu_copy"), ("self/memory", "self"), ("mystery/x", "unknown")],
)  # fmt: skip
def test_classify(transport: str, fabric: str) -> None:
    assert classify(transport) == fabric


@pytest.mark.parametrize(
    ("expected", "transports", "met", "fallback", "warning"),
    [("any", ["cma/memory"], True, False, None), ("shm", ["cma/memory"], True, False, None),
     ("rdma", ["rc_mlx5/mlx5_0:1", "cuda_copy/cuda"], True, False, None),
     ("nvlink", ["cuda_ipc/cuda"], True, False, None), ("tcp", ["tcp/lo"], True, False, None),
     ("rdma", ["tcp/eth0"], False, True, "WARNING: silent fallback to TCP"),
     ("nvlink", ["tcp/eth0", "cuda_copy/cuda"], False, True, "WARNING: silent fallback to TCP"),
     ("any", ["tcp/lo"], True, True, "WARNING: the data path uses only TCP"),
     ("rdma", ["cma/memory"], False, False, "WARNING: expected rdma"),
     ("rdma", [], False, False, "WARNING: could not detect"),
     ("any", [], True, False, "WARNING: could not detect")],
)  # fmt: skip
def test_expectation_verdict(
    expected: str, transports: list[str], met: bool, fallback: bool, warning: str | None
) -> None:
    verdict = evaluate(expected, transports, heuristic=False)
    assert (verdict.met, verdict.fallback_to_tcp) == (met, fallback)
    assert verdict.warnings[0].startswith(warning) if warning else verdict.warnings == ()


def _report(transports: tuple[tuple[str, ...], ...]) -> Report:
    nixl = TimingSummary(4 * K, 5, 1e-5, 2e-5, 0.4)
    memcpy = TimingSummary(4 * K, 5, 1e-6, 2e-6, 4.0)
    rows = tuple(build_row("READ", nixl, memcpy, t) for t in transports)
    verdict = evaluate("rdma", ["tcp/lo"], heuristic=False)
    return Report(
        "same-node", "cpu", None, rows, ("tcp/lo",), tp.SOURCE_PROTO_INFO, ("tcp/lo",),
        verdict, "1.23.0", 1.5,
    )  # fmt: skip


def test_report_json_has_the_documented_fields() -> None:
    doc = to_json(_report((("tcp/lo",),)))
    assert doc["mode"] == "same-node" and doc["device"] == "cpu" and doc["expected"] == "rdma"
    assert doc["fallback_to_tcp"] is True and doc["transports"] == ["tcp/lo"]
    (size,) = doc["sizes"]
    assert size["bytes"] == 4 * K and size["ratio_to_memcpy"] == pytest.approx(0.1)
    for key in ("latency_p50_s", "latency_p99_s", "bandwidth_gbps", "memcpy_bandwidth_gbps"):
        assert size[key] > 0
    with pytest.raises(ValueError):  # NIXL and memcpy rows must be the same size
        build_row("READ", TimingSummary(K, 1, 1, 1, 1), TimingSummary(2 * K, 1, 1, 1, 1), ())


def test_table_shows_transport_column_only_when_rows_differ_and_short_latencies() -> None:
    assert len(report_table(_report((("tcp/lo",), ("tcp/lo",)))).columns) == 8
    assert len(report_table(_report((("tcp/lo",), ("cma/memory",)))).columns) == 9
    cases = [(7.42e-6, "7.42µs"), (1.951e-4, "195µs"), (0.024, "24.0ms"), (2.5, "2.50s")]
    assert [format_seconds(seconds) for seconds, _ in cases] == [text for _, text in cases]


@pytest.mark.parametrize(
    "message",
    [wire.Hello(4 * K, "cpu", "kvc-i"), wire.Ready("kvc-t", b"\x00\xffmeta", 1 << 40, M, 0),
     wire.Check(1, 4 * K), wire.CheckResult(True), wire.Bye(), wire.Failure("no memory")],
)  # fmt: skip
def test_wire_round_trip(message: wire.Message) -> None:
    assert wire.decode(wire.encode(message)[4:]) == message


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"[]", b'{"type": "bye"}', b'{"v": 2, "type": "bye"}',
     b'{"v": 1, "type": "launch"}', b'{"v": 1, "type": "check", "seed": 1}'],
)  # fmt: skip
def test_wire_rejects(payload: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(payload)


def test_wire_over_a_socket_pair() -> None:
    left, right = socket.socketpair()
    with left, right:
        wire.send(left, wire.Check(1, 64))
        assert wire.expect(right, wire.Check) == wire.Check(1, 64)
        wire.send(left, wire.Failure("target out of memory"))
        with pytest.raises(wire.WireError, match="out of memory"):
            wire.expect(right, wire.Ready)
        left.sendall((wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(wire.WireError, match="exceeds"):
            wire.recv(right)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:18515", ("127.0.0.1", 18515)), (":9000", ("0.0.0.0", 9000)),
     ("9000", ("0.0.0.0", 9000)), ("[::1]:7", ("::1", 7)), ("host:", None), ("h:http", None),
     ("host:70000", None)],
)  # fmt: skip
def test_parse_address(text: str, expected: tuple[str, int] | None) -> None:
    if expected is None:
        with pytest.raises(ValueError):
            wire.parse_address(text, "0.0.0.0")
    else:
        assert wire.parse_address(text, "0.0.0.0") == expected


def test_buffers_options_and_ucx_environment() -> None:
    source, target = HostBuffer(100_000, seed=2), HostBuffer(100_000, seed=0)
    assert source.check(2, 100_000) and not source.check(0, 100_000)
    target.clear(50_000)
    assert not target.check(0, 50_000) and target.check(0, 10) is False
    samples = time_memcpy(target, source, 100_000, 3)
    assert len(samples) == 3 and min(samples) > 0 and target.check(2, 100_000)

    options = CheckOptions((4 * K, 256 * M), None, 1, ("READ", "WRITE"), "cpu", "same-node", "any")
    assert [options.iterations_for(s) for s in options.sizes] == [100, 10]
    assert options.total_steps() == (1 + 100) * 3 + (1 + 10) * 3  # READ, WRITE and memcpy
    env = tp.detection_env("/tmp/x.log", {"UCX_LOG_LEVEL": "warn"})
    assert env == {"UCX_LOG_LEVEL": "info", "UCX_PROTO_INFO": "y", "UCX_LOG_FILE": "/tmp/x.log"}
    assert tp.detection_env("/x", {"UCX_LOG_LEVEL": "DEBUG"})["UCX_LOG_LEVEL"] == "debug"

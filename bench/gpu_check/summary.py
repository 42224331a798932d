"""The GPU check's one summary table, from the raw files of one run (pure but for `load`).

Inputs, all in the run's output folder (any may be missing: its step failed or was skipped):

* ``steps.jsonl``: one ``{"step", "rc", "elapsed_s", "timeout_s"}`` line per step, written by
  scripts/gpu-check.sh (rc 124/137: the step ran out of time; -1: skipped; 130: interrupted);
* ``env.json`` (GPU and library versions), ``model.json`` (the model's size and shape);
* ``kv_check.json`` (`pdserve kv-check --json`), ``identity.json`` (identity.report),
  ``bench.json`` (`pdserve bench --json`), ``metrics.txt`` (the router's /metrics after the
  benchmark: the KV handoffs pdserve itself timed).

`summarize` turns them into rows and a verdict: the run passes when every step exited 0 and
the identity check passed. A fallback to TCP or failed benchmark requests are shown, marked,
but do not fail the run on their own.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

FILES = ("env.json", "model.json", "kv_check.json", "identity.json", "bench.json")
TIMEOUT_RCS = (124, 137)
SKIPPED_RC = -1
INTERRUPTED_RC = 130


@dataclass(frozen=True)
class Step:
    name: str
    rc: int
    elapsed_s: float
    timeout_s: float | None = None


@dataclass(frozen=True)
class Inputs:
    """One run's raw results; `docs` maps a file name of FILES to its parsed JSON."""

    steps: tuple[Step, ...] = ()
    docs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # unreadable files
    metrics_text: str | None = None


@dataclass(frozen=True)
class Row:
    section: str
    metric: str
    value: str
    ok: bool | None = None  # None: informational


@dataclass(frozen=True)
class Summary:
    rows: tuple[Row, ...]
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failures": list(self.failures),
            "rows": [asdict(r) for r in self.rows],
        }


def fmt_bytes(num: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num >= size:
            value = num / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{num:.0f} B"


def fmt_s(value: Any) -> str:
    """Seconds as ms (or µs below 1 ms); '-' for None."""
    if not isinstance(value, int | float):
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    return f"{value * 1e3:.1f} ms" if value < 10 else f"{value:.1f} s"


def fmt_num(value: Any, digits: int = 1, unit: str = "") -> str:
    return f"{value:.{digits}f}{unit}" if isinstance(value, int | float) else "-"


def _step_rows(steps: Sequence[Step]) -> tuple[list[Row], list[str]]:
    rows, failures = [], []
    for s in steps:
        if s.rc == 0:
            status, ok = "ok", True
        elif s.rc == SKIPPED_RC:
            status, ok = "skipped (no time left or an earlier step failed)", False
        elif s.rc == INTERRUPTED_RC:
            status, ok = "interrupted", False
        elif s.rc in TIMEOUT_RCS:
            status, ok = f"timed out (limit {fmt_num(s.timeout_s, 0)} s)", False
        else:
            status, ok = f"failed (exit {s.rc})", False
        if not ok:
            failures.append(f"step {s.name}: {status}")
        rows.append(Row("steps", s.name, f"{status}, {s.elapsed_s:.1f} s", ok))
    total = sum(s.elapsed_s for s in steps)
    rows.append(Row("steps", "total", f"{total:.1f} s"))
    return rows, failures


def _env_rows(env: Mapping[str, Any]) -> list[Row]:
    return [Row("environment", str(k), str(v)) for k, v in env.items()]


def _model_rows(model: Mapping[str, Any]) -> list[Row]:
    rows = [Row("model", "size", f"{model.get('size')} ({model.get('dtype')})")]
    if isinstance(model.get("num_parameters"), int):
        millions = model["num_parameters"] / 1e6
        rows.append(Row("model", "parameters", f"{millions:.{0 if millions >= 10 else 1}f} M"))
    if isinstance(model.get("weight_bytes"), int):
        weights = model["weight_bytes"]
        rows.append(Row("model", "weights", f"{weights / 1e6:.0f} MB ({fmt_bytes(weights)})"))
    if isinstance(model.get("kv_cache_bytes_per_token"), int):
        rows.append(
            Row("model", "KV cache per token", fmt_bytes(model["kv_cache_bytes_per_token"]))
        )
    return rows


def _kv_rows(kv: Mapping[str, Any]) -> list[Row]:
    rows = []
    for size in kv.get("sizes", []):
        value = (
            f"p50 {fmt_s(size.get('latency_p50_s'))}, p99 {fmt_s(size.get('latency_p99_s'))}, "
            f"{fmt_num(size.get('bandwidth_gbps'), 2)} GB/s "
            f"({fmt_num(size.get('ratio_to_memcpy'), 2)}x memcpy)"
        )
        rows.append(Row("kv-check", f"{size.get('op')} {fmt_bytes(size.get('bytes', 0))}", value))
    transports = ", ".join(kv.get("transports", [])) or "not detected"
    fabrics = ", ".join(kv.get("fabrics", [])) or "-"
    rows.append(Row("kv-check", "data path", f"{transports} (fabric: {fabrics})"))
    fallback = bool(kv.get("fallback_to_tcp"))
    rows.append(Row("kv-check", "fell back to TCP", "YES" if fallback else "no", not fallback))
    rows += [Row("kv-check", "warning", str(w), False) for w in kv.get("warnings", [])]
    return rows


def _identity_rows(identity: Mapping[str, Any]) -> tuple[list[Row], list[str]]:
    counts = identity.get("counts", {})
    passed = bool(identity.get("passed"))
    text = (
        f"{counts.get('identical', 0)}/{identity.get('num_prompts', 0)} identical, "
        f"{counts.get('near_tie', 0)} near ties (at most {identity.get('max_near_ties')}), "
        f"{counts.get('different', 0)} different, {counts.get('error', 0)} errors"
    )
    rows = [Row("identity", "prompts vs aggregated vLLM", text, passed)]
    transfers = identity.get("kv_transfers")
    rows.append(Row("identity", "KV handoffs counted", fmt_num(transfers, 0)))
    for p in identity.get("prompts", []):
        if p.get("verdict") != "identical":
            ok = None if p.get("verdict") == "near_tie" else False  # a tie is tolerated
            rows.append(
                Row("identity", str(p.get("prompt")), f"{p.get('verdict')}: {p.get('detail')}", ok)
            )
    return rows, ([] if passed else ["identity check failed"])


def _bench_rows(bench: Mapping[str, Any]) -> list[Row]:
    rows = []
    for name, m in bench.get("policies", {}).items():
        label = "" if name == "default" else f" [{name}]"
        errors = m.get("num_errors", 0)
        rows += [
            Row(
                "bench",
                f"requests{label}",
                f"{m.get('num_requests')} ({errors} errors)",
                errors == 0,
            ),
            Row(
                "bench",
                "TTFT p50 / p99",
                f"{fmt_s(m.get('ttft_p50_s'))} / {fmt_s(m.get('ttft_p99_s'))}",
            ),
            Row(
                "bench",
                "ITL p50 / p99",
                f"{fmt_s(m.get('itl_p50_s'))} / {fmt_s(m.get('itl_p99_s'))}",
            ),
            Row("bench", "TPOT p50", fmt_s(m.get("tpot_p50_s"))),
            Row(
                "bench",
                "throughput",
                f"{fmt_num(m.get('requests_per_s'), 2)} req/s, "
                f"{fmt_num(m.get('output_tokens_per_s'), 0)} output tok/s",
            ),
        ]
    cfg = bench.get("config", {})
    if cfg:
        rows.append(
            Row(
                "bench",
                "load",
                f"{cfg.get('workload')}: {cfg.get('num_requests')} requests, concurrency "
                f"{cfg.get('concurrency')}, prompts {cfg.get('short_tokens')}/"
                f"{cfg.get('long_tokens')} tokens, {cfg.get('output_tokens')} out",
            )
        )
    return rows


def kv_transfer_totals(metrics_text: str) -> dict[str, float]:
    """Sums of the router's KV transfer histograms: `count`, `seconds`, `bytes` (zeros when
    absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = {"count": 0.0, "seconds": 0.0, "bytes": 0.0}
    wanted = {
        "pdserve_kv_transfer_seconds_count": "count",
        "pdserve_kv_transfer_seconds_sum": "seconds",
        "pdserve_kv_transfer_bytes_sum": "bytes",
    }
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[wanted[sample.name]] += float(sample.value)
    return totals


def _pdserve_kv_rows(metrics_text: str) -> list[Row]:
    t = kv_transfer_totals(metrics_text)
    if not t["count"]:
        return [Row("kv (pdserve)", "handoffs timed by the router", "none", False)]
    mean_s, mean_bytes = t["seconds"] / t["count"], t["bytes"] / t["count"]
    rate = t["bytes"] / t["seconds"] / 1e9 if t["seconds"] else None
    return [
        Row("kv (pdserve)", "handoffs timed by the router", f"{t['count']:.0f}"),
        Row("kv (pdserve)", "mean per handoff", f"{fmt_s(mean_s)}, {fmt_bytes(mean_bytes)}"),
        Row("kv (pdserve)", "effective bandwidth", f"{fmt_num(rate, 2)} GB/s"),
    ]


def summarize(inputs: Inputs) -> Summary:
    """Rows and failures of one run (pure)."""
    rows: list[Row] = []
    failures: list[str] = list(inputs.problems)
    docs = inputs.docs
    if "env.json" in docs:
        rows += _env_rows(docs["env.json"])
    if "model.json" in docs:
        rows += _model_rows(docs["model.json"])
    step_rows, step_failures = _step_rows(inputs.steps)
    rows += step_rows
    failures += step_failures
    if "kv_check.json" in docs:
        rows += _kv_rows(docs["kv_check.json"])
    if "identity.json" in docs:
        identity_rows, identity_failures = _identity_rows(docs["identity.json"])
        rows += identity_rows
        failures += identity_failures
    elif any(s.name == "identity" for s in inputs.steps):
        failures.append("identity.json missing")
    if "bench.json" in docs:
        rows += _bench_rows(docs["bench.json"])
    if inputs.metrics_text is not None:
        rows += _pdserve_kv_rows(inputs.metrics_text)
    if not inputs.steps:
        failures.append("no steps recorded (steps.jsonl missing or empty)")
    return Summary(tuple(rows), tuple(dict.fromkeys(failures)))


def load(folder: pathlib.Path) -> Inputs:
    """Read one run's files; unreadable ones become `problems`, missing ones are skipped."""
    steps: list[Step] = []
    problems: list[str] = []
    steps_file = folder / "steps.jsonl"
    if steps_file.exists():
        for i, line in enumerate(steps_file.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                steps.append(
                    Step(str(raw["step"]), int(raw["rc"]), float(raw["elapsed_s"]),
                         raw.get("timeout_s"))
                )  # fmt: skip
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(f"steps.jsonl line {i} unreadable: {exc}")
    docs: dict[str, Mapping[str, Any]] = {}
    for name in FILES:
        path = folder / name
        if not path.exists():
            continue
        try:
            doc = json.loads(path.read_text())
        except ValueError as exc:
            problems.append(f"{name} is not valid JSON: {exc}")
            continue
        if isinstance(doc, dict):
            docs[name] = doc
        else:
            problems.append(f"{name}: expected a JSON object")
    metrics = folder / "metrics.txt"
    metrics_text = metrics.read_text() if metrics.exists() else None
    return Inputs(tuple(steps), docs, tuple(problems), metrics_text)


def render(summary: Summary, console: Console, title: str = "pdserve GPU check") -> None:
    """Print the one table and the verdict."""
    verdict = "[green]PASS[/green]" if summary.passed else "[red]FAIL[/red]"
    table = Table(title=f"{title}: {verdict}", show_lines=False)
    table.add_column("check")
    table.add_column("metric")
    table.add_column("value", overflow="fold")
    previous = None
    for row in summary.rows:
        if previous is not None and row.section != previous:
            table.add_section()
        mark = "" if row.ok is None else (" [green]✓[/green]" if row.ok else " [red]✗[/red]")
        section = row.section if row.section != previous else ""
        table.add_row(escape(section), escape(row.metric), escape(row.value) + mark)
        previous = row.section
    console.print(table)
    for failure in summary.failures:
        console.print(f"[red]failed:[/red] {escape(failure)}")

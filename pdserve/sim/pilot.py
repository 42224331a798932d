"""How well a fit describes the pilot run it was fitted on (pure): predict each of the run's
deployments with the fitted profile on the run's own workload and compare with the bound
(pdserve.sim.bounds). A fit that misses cells of its own pilot has fitted something the
simulator does not reproduce on that run (run AM's pilot: host stalls). It is reported as a
fact, not as a verdict on the pilot: in bench/RESULTS.md a fit that missed one cell of its
pilot held every cell of the next run and one that held its whole pilot missed four (run AN).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport
from pdserve.bench.trace import TraceRecord
from pdserve.sim.bounds import within
from pdserve.sim.layout import SimLayout
from pdserve.sim.predict import ComparedRow, compare, predict
from pdserve.sim.profile import SimProfile


@dataclass(frozen=True)
class PilotCheck:
    """The fit's bounded cells on its own pilot: how many there are and which missed."""

    cells: int
    misses: tuple[ComparedRow, ...]

    @property
    def held(self) -> int:
        return self.cells - len(self.misses)


def check_on_pilot(
    fitted: SimProfile,
    report: BenchReport,
    layouts: Mapping[str, SimLayout],
    cfg: BenchConfig,
    records: Sequence[TraceRecord] = (),
    runs: int | None = None,
) -> PilotCheck:
    """Predict every deployment of `layouts` the pilot `report` measured with `fitted` on the
    pilot's workload `cfg` and count its TTFT/ITL cells inside the bound. `runs` as
    `predict`'s (None: its default for the request count)."""
    predictions = [
        predict(name, layout, fitted, cfg, records, runs=runs)
        for name, layout in layouts.items()
        if name in report.policies
    ]
    verdicts = [(row, within(row)) for row in compare(predictions, report)]
    bounded = [(row, ok) for row, ok in verdicts if ok is not None]
    return PilotCheck(cells=len(bounded), misses=tuple(row for row, ok in bounded if ok is False))

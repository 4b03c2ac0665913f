"""The campaign's command line: its options, and ``main``, which runs the campaign and writes its report."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .._common import add_out_argument, machine_info, make_parser, write_json
from .campaign import campaign
from .config import FAULTS
from .report import failure_record, summarize, summary_table

__all__ = ["main"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the campaign, print its table and write ``faults.json``; return the report."""
    from . import __doc__ as campaign_doc  # the package's docstring describes the command

    parser = make_parser(campaign_doc, prog="python -m benchmarks.faults")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="run i draws its configuration from seed + i")
    parser.add_argument("--faults", type=str, default=",".join(FAULTS), help="comma-separated faults to draw from")
    parser.add_argument("--run-limit", type=float, default=60.0, help="seconds after which a run counts as hung")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    faults = tuple(args.faults.split(","))
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
    logging.basicConfig(level=logging.CRITICAL)  # the loaders log the injected failures; the table says enough
    start = time.perf_counter()
    outcomes = campaign(args.runs, args.seed, args.run_limit, faults)
    report = summarize(outcomes)
    report["seconds"] = time.perf_counter() - start
    report["seed"] = args.seed
    report["failures"] = [failure_record(o) for o in outcomes if not o.ok]
    report["machine"] = machine_info()
    print(summary_table(report))
    print(f"{args.runs} runs from seed {args.seed} in {report['seconds']:.0f} s")
    write_json(Path(args.out) / "faults.json", report)
    return report

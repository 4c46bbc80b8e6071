"""``fpemu verify CAMPAIGN``: run a verification campaign (see :mod:`fpemu.verify`).

Prints the report (a rich table, ``--json`` or ``--markdown``); exit status 0 when the campaign
is complete without a mismatch, 1 otherwise, 2 for bad arguments.

>>> import argparse
>>> p = argparse.ArgumentParser(prog="fpemu verify")
>>> configure(p)
>>> args = p.parse_args(["sqrt-e4m3fn-rna", "--scheduler", "sync", "--markdown"])
>>> run(args)  # doctest: +ELLIPSIS
### sqrt-e4m3fn-rna: 0 mismatches in 256 cases
<BLANKLINE>
fpemu.sqrt to float8_e4m3fn, mode rna, vs the independent checker: ... (256 cases)
0
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from fpemu.cli.errors import UsageError
from fpemu.cli.html_out import add_html_option, check_html_path, write_html
from fpemu.verify import campaigns, get_campaign, run_campaign


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``verify`` arguments to ``parser``."""
    parser.add_argument(
        "campaign", nargs="?", metavar="CAMPAIGN", help="campaign name (see --list)"
    )
    parser.add_argument("--list", action="store_true", help="list the campaigns and exit")
    parser.add_argument(
        "--results",
        metavar="DIR",
        help="results folder: finished chunks are recorded, a rerun skips them",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="dask.distributed scheduler address (tcp://host:8786), or 'sync' "
        "(one process) or 'threads' (default when Dask is installed)",
    )
    parser.add_argument("--chunks", type=int, metavar="N", help="number of chunks (tasks)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument("--markdown", action="store_true", help="print the report as markdown")
    add_html_option(parser)


def run(args: argparse.Namespace) -> int:
    """Run the campaign named by ``args``; 0 when complete without mismatch, else 1."""
    check_html_path(args.html)
    if args.list:
        for name in campaigns():
            c = get_campaign(name)
            print(f"{name:30s} {c.domain.describe()}")
        return 0
    if not args.campaign:
        raise UsageError("CAMPAIGN: a campaign name is required (see fpemu verify --list)")
    try:
        c = get_campaign(args.campaign)
    except ValueError:
        raise UsageError(
            f"CAMPAIGN {args.campaign}: not a campaign; see fpemu verify --list"
        ) from None
    if args.chunks is not None and not 1 <= args.chunks <= c.size:
        raise UsageError(f"--chunks {args.chunks}: expected 1 to {c.size} for {c.name}")
    sched = args.scheduler
    if sched is not None and sched not in ("sync", "threads") and ":" not in sched:
        raise UsageError(
            f"--scheduler {sched}: expected 'sync', 'threads' or an address "
            "such as tcp://127.0.0.1:8786"
        )
    try:
        report = run_campaign(c, results=args.results, chunks=args.chunks, scheduler=sched)
    except (ValueError, RuntimeError) as exc:  # a results folder of another run, no Dask
        raise UsageError(str(exc).splitlines()[0]) from None
    if args.json:
        print(report.to_json())
    elif args.markdown:
        print(report.to_markdown())
    else:
        Console(file=sys.stdout).print(report.to_rich())
    write_html(args.html, report)
    return 0 if report.ok else 1

"""``fpemu verify CAMPAIGN``: run a verification campaign (see :mod:`fpemu.verify`).

Prints the report (a rich table, ``--json`` or ``--markdown``); exit status 0 when the campaign
is complete without a mismatch, 1 otherwise, 2 for bad arguments. ``--workers N`` runs it on a
``distributed.LocalCluster`` of N worker processes started and stopped for the run
(``pip install 'fpemu[scale]'``); ``--scheduler ADDRESS`` on a cluster already running.

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
import importlib.util
import sys

from rich.console import Console

from fpemu.cli.errors import UsageError
from fpemu.daskarray import local_cluster
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
    parser.add_argument(
        "--workers",
        metavar="N",
        help="start a local Dask cluster of N one-thread worker processes for this run "
        "(stopped at the end; not with --scheduler)",
    )
    parser.add_argument("--chunks", type=int, metavar="N", help="number of chunks (tasks)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument("--markdown", action="store_true", help="print the report as markdown")


def _workers(value: str | None, scheduler: str | None) -> int | None:
    """``--workers N`` as an int >= 1 (None when not given); not with ``--scheduler``."""
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--workers {value}: expected an integer >= 1")
    if scheduler is not None:
        raise UsageError(
            f"--workers {value}: starts its own local cluster; not with --scheduler {scheduler}"
        )
    if importlib.util.find_spec("distributed") is None:
        raise UsageError(f"--workers {value}: needs distributed: pip install 'fpemu[scale]'")
    return n


def run(args: argparse.Namespace) -> int:
    """Run the campaign named by ``args``; 0 when complete without mismatch, else 1."""
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
    workers = _workers(args.workers, sched)
    try:
        if workers is None:
            report = run_campaign(c, results=args.results, chunks=args.chunks, scheduler=sched)
        else:
            with local_cluster(workers) as client:
                report = run_campaign(c, results=args.results, chunks=args.chunks, scheduler=client)
    except (ValueError, RuntimeError) as exc:  # a results folder of another run, no Dask
        raise UsageError(str(exc).splitlines()[0]) from None
    if args.json:
        print(report.to_json())
    elif args.markdown:
        print(report.to_markdown())
    else:
        Console(file=sys.stdout).print(report.to_rich())
    return 0 if report.ok else 1

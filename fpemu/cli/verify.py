"""``fpemu verify CAMPAIGN``: run a verification campaign (see :mod:`fpemu.verify`).

Prints the report (a rich table of the first mismatches, or one line ``0 mismatches in N
cases``; ``--json`` or ``--markdown``); exit status 0 when the campaign is complete without a
mismatch, 1 otherwise, 2 for bad arguments. ``--list`` prints the campaigns grouped by family
(the operation), sorted, with their sizes (``2^32 (4.3 G)``); ``--list --filter GLOB`` only
those whose name matches. The results folder and a scheduler address are checked before
anything runs (an address must answer within a few seconds). ``--workers N`` runs it on a
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
>>> human_size(2**32), human_size(2985984), human_size(256)
('2^32 (4.3 G)', '2985984 (3.0 M)', '256')
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import os
import re
import socket
import textwrap
from pathlib import Path

from fpemu.cli import output
from fpemu.cli.errors import UsageError
from fpemu.cli.html_out import add_html_option, check_html_path, write_html
from fpemu.daskarray import local_cluster
from fpemu.verify import campaigns, get_campaign, run_campaign

#: Seconds to wait for a scheduler address to accept a connection.
CONNECT_TIMEOUT = 3.0


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``verify`` arguments to ``parser``."""
    parser.add_argument(
        "campaign", nargs="?", metavar="CAMPAIGN", help="campaign name (see --list)"
    )
    parser.add_argument("--list", action="store_true",
                        help="list the campaigns by family, with sizes, and exit")  # fmt: skip
    parser.add_argument("--filter", metavar="GLOB",
                        help="with --list: only campaigns whose name matches, e.g. 'fma-*-rne*' "
                             "or '*e4m3*'")  # fmt: skip
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
    add_html_option(parser)


def human_size(n: int) -> str:
    """A case count: ``2^k`` for a power of two, with an SI approximation from 10^4 up."""
    if n < 10_000:
        return str(n)
    exact = f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{exact} ({n / scale:.{1 if n / scale < 100 else 0}f} {suffix})"
    return exact  # pragma: no cover - n >= 10_000 has a suffix


def listing(pattern: str | None = None, width: int = 80) -> str:
    """The campaigns (matching the glob ``pattern``) by family, sorted, one line each.

    >>> print(listing("sqrt-e4m3fn-r[nt]*"))  # doctest: +NORMALIZE_WHITESPACE
    sqrt (4 campaigns)
      sqrt-e4m3fn-rna    256  every float8_e4m3fn code
      sqrt-e4m3fn-rne    256  every float8_e4m3fn code
      sqrt-e4m3fn-rto    256  every float8_e4m3fn code
      sqrt-e4m3fn-rtz    256  every float8_e4m3fn code
    """
    names = sorted(n for n in campaigns() if pattern is None or fnmatch.fnmatchcase(n, pattern))
    families: dict[str, list[str]] = {}
    for n in names:
        families.setdefault(n.split("-")[0], []).append(n)
    sizes = {n: human_size(get_campaign(n).size) for n in names}
    pad = max((len(n) for n in names), default=0)
    spad = max((len(s) for s in sizes.values()), default=0)
    lines: list[str] = []
    for family, members in sorted(families.items()):
        if lines:
            lines.append("")
        lines.append(f"{family} ({len(members)} campaign{'s' if len(members) != 1 else ''})")
        for n in members:
            domain = re.sub(r" \(\d+ cases\)$", "", get_campaign(n).domain.describe())
            lines += textwrap.wrap(domain, width=width,
                                   initial_indent=f"  {n:<{pad}}  {sizes[n]:>{spad}}  ",
                                   subsequent_indent=" " * (pad + spad + 6))  # fmt: skip
    return "\n".join(lines)


def _check_list(args: argparse.Namespace) -> None:
    if args.campaign:
        raise UsageError(f"CAMPAIGN {args.campaign}: not with --list; to list some campaigns: "
                         f"--list --filter '{args.campaign}*'")  # fmt: skip
    for flag, value in (("--results", args.results), ("--scheduler", args.scheduler),
                        ("--chunks", args.chunks), ("--json", args.json or None),
                        ("--markdown", args.markdown or None),
                        ("--workers", args.workers)):  # fmt: skip
        if value is not None:
            raise UsageError(f"{flag}: not with --list (--list prints the campaigns and exits; "
                             "--filter GLOB selects them)")  # fmt: skip


def _check_results(folder: str) -> None:
    """Create the results folder now (a rerun reuses it), or refuse it in one line."""
    p = Path(folder)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--results {folder}: is a file; expected a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--results {folder}: cannot create the folder: "
                         f"{exc.strerror or exc}") from None  # fmt: skip
    if not os.access(p, os.W_OK):
        raise UsageError(f"--results {folder}: folder is not writable")


def check_scheduler(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Refuse a ``tcp://host:port`` (or ``host:port``) address nothing answers on within
    ``timeout`` seconds, before Dask's own client waits its 30 s and raises.

    >>> check_scheduler("tcp://127.0.0.1:1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fpemu.cli.errors.UsageError: --scheduler tcp://127.0.0.1:1: no scheduler answers there ...
    """
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in ("tcp", "tls"):  # ucx://, inproc://: left to Dask
        return
    host, colon, port = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit():
        raise UsageError(f"--scheduler {address}: expected an address such as "
                         "tcp://127.0.0.1:8786")  # fmt: skip
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise UsageError(f"--scheduler {address}: no scheduler answers there ({why}); "
                         "start one (dask scheduler) or use --scheduler threads"
                         ) from None  # fmt: skip


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
    check_html_path(args.html)
    if args.list:
        _check_list(args)
        text = listing(args.filter, output.width() or 80)
        if not text:
            raise UsageError(f"--filter {args.filter}: no campaign matches; fpemu verify --list "
                             "shows them all")  # fmt: skip
        print(text)
        return 0
    if args.filter is not None:
        raise UsageError(f"--filter {args.filter}: only with --list")
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
    if sched is not None and sched not in ("sync", "threads"):
        check_scheduler(sched)
    workers = _workers(args.workers, sched)
    if args.results is not None:
        _check_results(args.results)
    try:
        if workers is None:
            report = run_campaign(c, results=args.results, chunks=args.chunks, scheduler=sched)
        else:
            with local_cluster(workers) as client:
                report = run_campaign(c, results=args.results, chunks=args.chunks, scheduler=client)
    except (ValueError, RuntimeError, OSError) as exc:  # another run's folder, no Dask
        raise UsageError(str(exc).splitlines()[0]) from None
    if args.json:
        print(report.to_json())
    elif args.markdown:
        print(report.to_markdown())
    elif report.mismatches == 0:  # nothing to tabulate: one line, then what was checked
        w = output.width() or 80
        print(report.headline())
        print(textwrap.fill(report.description, width=w, break_on_hyphens=False))
    else:
        output.console().print(report.to_rich())
    write_html(args.html, report)
    return 0 if report.ok else 1

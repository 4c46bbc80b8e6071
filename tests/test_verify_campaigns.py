"""fpemu.verify: domains, campaigns, planted bugs, resumable results, schedulers, reports, CLI."""

from __future__ import annotations

import argparse
import builtins
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from rich.console import Console

import reference
from fpemu.verify import (
    AllCodes,
    AllPairs,
    AllTuples,
    Boundary,
    Campaign,
    Checker,
    FpemuOp,
    RandomCodes,
    ResultStore,
    campaigns,
    chunk_bounds,
    evaluate_chunk,
    get_campaign,
    register_campaign,
    run_campaign,
    values,
)
from fpemu.verify.run import Progress
from fpemu.verify.store import CHUNKS

E4M3 = "float8_e4m3fn"


# -- planted bugs (module level: picklable) ----------------------------------------------------
@dataclass(frozen=True)
class TieBug:
    """fpemu's op rounded with ties to even where the campaign's mode breaks ties away."""

    op: str
    fmt: str

    def __call__(self, *xs: Any) -> Any:
        return FpemuOp(self.op, self.fmt, "rne")(*xs)


@dataclass(frozen=True)
class LostZeroSign:
    """fpemu's op whose zero results lose their sign."""

    op: str
    fmt: str
    mode: str

    def __call__(self, *xs: Any) -> Any:
        return FpemuOp(self.op, self.fmt, self.mode)(*xs) + 0.0  # -0 + 0 = +0


def _oracle(op: str, x: float, y: float, mode: str) -> float:
    return float(getattr(reference, op)(x, y, reference.E4M3FN, mode))


def test_domains_are_chunk_invariant() -> None:
    for d in (
        AllPairs(E4M3),
        AllTuples("e5m2", 3),
        Boundary("fp16", 2),
        AllCodes("bf16"),
        RandomCodes("bf16", 3, 1000, seed=5),
    ):
        whole = d.cases(0, 999)
        for n in (1, 7):
            parts = [d.cases(*chunk_bounds(999, i, n)) for i in range(n)]
            for j in range(d.arity):
                assert np.array_equal(np.concatenate([p[j] for p in parts]), whole[j])
    pairs = AllPairs(E4M3).cases(0, 65536)
    assert len({(int(a), int(b)) for a, b in zip(*pairs, strict=True)}) == 65536  # every pair, once
    assert int(RandomCodes("fp16", 1, 10**5, 1).cases(0, 10**5)[0].max()) < 2**16


def test_registry_holds_the_shipped_campaigns() -> None:
    names = set(campaigns())
    for mode in ("rne", "rna", "rtz", "rup", "rdown", "rto"):
        for fmt in ("fp16", "bf16"):
            assert {f"{op}-{fmt}-{mode}" for op in ("add", "sub", "mul", "div")} <= names
        for fmt in ("fp16", "bf16", "e4m3fn", "e5m2"):
            assert {f"sqrt-{fmt}-{mode}", f"cast-fp32-{fmt}-{mode}"} <= names
        assert {f"fma-e4m3fn-{mode}", f"fma-e5m2-{mode}"} <= names
    assert {f"torch-{op}-{f}" for op in ("add", "mul", "div") for f in ("fp16", "bf16")} <= names
    assert get_campaign("add-fp16-rne").size == 2**32
    assert get_campaign("fma-e5m2-rtz").size == 2**24
    assert get_campaign("fma-fp16-rne").size == 2**48
    assert get_campaign("cast-fp32-bf16-rup").size == 2**32


@pytest.mark.parametrize(
    "name", ["sub-e5m2-rup", "div-e4m3fn-rto", "sqrt-fp16-rdown", "sqrt-bf16-rna"]
)
def test_small_shipped_campaigns_pass(name: str) -> None:
    assert run_campaign(name, scheduler="sync").ok


def test_planted_wrong_tie_is_found() -> None:
    c = Campaign(
        "tie-bug",
        AllPairs(E4M3),
        TieBug("add", E4M3),
        Checker("add", E4M3, "rna"),
        E4M3,
        Checker("add", E4M3, "rna").parts,
    )
    rep = run_campaign(c, chunks=4, scheduler="sync")
    # ties between 448 and 480 overflow to NaN under rna (e4m3fn has no 480): class "nan"
    assert set(rep.counts) == {"tie", "nan"} and rep.counts["tie"] > 100
    for e in rep.examples:  # each example really is a tie that rne and rna break differently
        x, y = (float(values(np.array([int(o, 16)]), E4M3)[0]) for o in e["operands"])
        rna, rne = _oracle("add", x, y, "rna"), _oracle("add", x, y, "rne")
        assert rna != rne
        assert e["expected"] == f"0x{int(np.array([rna]).astype(_ml()).view(np.uint8)[0]):02x}"


def _ml() -> Any:
    return ml_dtypes.float8_e4m3fn


def test_planted_lost_zero_sign_is_found() -> None:
    c = Campaign(
        "zero-bug",
        AllPairs(E4M3),
        LostZeroSign("sub", E4M3, "rdown"),
        Checker("sub", E4M3, "rdown"),
        E4M3,
    )
    rep = run_campaign(c, chunks=3, scheduler="sync")
    xs = [values(k, E4M3) for k in AllPairs(E4M3).cases(0, 65536)]
    want = Checker("sub", E4M3, "rdown")(*xs)
    negzero = int(((want == 0) & np.signbit(want)).sum())  # every -0 result becomes +0
    assert negzero > 200 and rep.counts == {"zero": negzero}
    e = rep.examples[0]
    x, y = (float(values(np.array([int(o, 16)]), E4M3)[0]) for o in e["operands"])
    assert str(_oracle("sub", x, y, "rdown")) == "-0.0" and e["got"] == "0x00"
    assert e["expected"] == "0x80"


def test_interrupted_run_resumes_without_loss_or_double_count(tmp_path: Path) -> None:
    c = Campaign(
        "tie-bug-mul",
        AllPairs(E4M3),
        TieBug("mul", E4M3),
        Checker("mul", E4M3, "rna"),
        E4M3,
        Checker("mul", E4M3, "rna").parts,
    )
    full = run_campaign(c, chunks=8, scheduler="sync")
    seen: list[int] = []

    def crash(r: Any) -> None:
        seen.append(r.index)
        if len(seen) == 3:
            raise KeyboardInterrupt  # the run dies after recording three chunks

    with pytest.raises(KeyboardInterrupt):
        run_campaign(c, results=tmp_path, chunks=8, scheduler="sync", on_chunk=crash)
    with open(tmp_path / CHUNKS, "a", encoding="utf-8") as fh:
        fh.write('{"chunk": 5, "lo": 40')  # a torn line: the process died mid-write
    partial = ResultStore(tmp_path, campaign=c.name, chunks=8, size=c.size).done()
    assert sorted(partial) == sorted(seen)
    rerun: list[int] = []
    rep = run_campaign(
        c, results=tmp_path, chunks=8, scheduler="sync", on_chunk=lambda r: rerun.append(r.index)
    )
    assert sorted(rerun) == [i for i in range(8) if i not in seen]  # finished chunks skipped
    assert rep.results() == full.results() and rep.mismatches > 0
    lines = (tmp_path / CHUNKS).read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(s)["chunk"] for s in lines) == list(range(8))
    again: list[int] = []
    run_campaign(c, results=tmp_path, chunks=8, on_chunk=lambda r: again.append(r.index))
    assert again == []
    with pytest.raises(ValueError, match="in 8 chunks; this run is 'tie-bug-mul' in 4 chunks"):
        run_campaign(c, results=tmp_path, chunks=4)


def test_threads_and_no_dask_give_the_same_report(monkeypatch: pytest.MonkeyPatch) -> None:
    c = Campaign(
        "tie-bug-sub",
        AllPairs("e5m2"),
        TieBug("sub", "e5m2"),
        Checker("sub", "e5m2", "rna"),
        "e5m2",
        Checker("sub", "e5m2", "rna").parts,
    )
    threaded = run_campaign(c, chunks=6, scheduler="threads", workers=2)
    assert threaded.extra["scheduler"] == "threads"
    real_import = builtins.__import__

    def no_dask(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "dask" or name.startswith(("dask.", "distributed")):
            raise ImportError(f"No module named {name!r} (test)")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    alone = run_campaign(c, chunks=6)
    assert alone.extra["scheduler"] == "sync"
    assert alone.results() == threaded.results() and alone.mismatches > 0
    with pytest.raises(ValueError, match="needs Dask"):
        run_campaign(c, chunks=6, scheduler="threads")


def test_report_formats() -> None:
    c = Campaign(
        "zero-bug-add",
        AllPairs(E4M3),
        LostZeroSign("add", E4M3, "rdown"),
        Checker("add", E4M3, "rdown"),
        E4M3,
    )
    rep = run_campaign(c, chunks=2, scheduler="sync")
    d = json.loads(rep.to_json())
    assert d["cases"] == 65536 and d["mismatches"] == rep.mismatches == d["counts"]["zero"]
    md = rep.to_markdown()
    assert md.startswith(f"### zero-bug-add: {rep.mismatches} mismatches in 65536 cases")
    assert "| zero |" in md and rep.examples[0]["operands"][0] in md
    con = Console(width=120, record=True)
    con.print(rep.to_rich())
    assert "zero" in con.export_text()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown campaign='nope'"):
        get_campaign("nope")
    with pytest.raises(ValueError, match=r"chunks=0: expected an int in \[1, 256\]"):
        run_campaign("sqrt-e5m2-rne", chunks=0)
    with pytest.raises(ValueError, match="scheduler='mpi'"):
        run_campaign("sqrt-e5m2-rne", scheduler="mpi")
    with pytest.raises(ValueError, match="workers=0"):
        run_campaign("sqrt-e5m2-rne", workers=0, scheduler="threads")
    with pytest.raises(ValueError, match="arity=4"):
        AllTuples("fp16", 4)
    with pytest.raises(ValueError, match="has 32 bits"):
        AllPairs("fp32")
    with pytest.raises(ValueError, match="count=0"):
        RandomCodes("fp16", 1, 0)
    with pytest.raises(TypeError, match="domain="):
        Campaign("x", "fp16", abs, abs, "fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        register_campaign(get_campaign("add-fp16-rne"))
    with pytest.raises(ValueError, match=r"n=0 chunks"):
        evaluate_chunk(get_campaign("sqrt-e5m2-rne"), 0, 0)


def _cli() -> Any:
    from fpemu.cli import verify  # noqa: PLC0415 - the command module, as main loads it

    return verify


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fpemu verify")
    _cli().configure(p)
    return p.parse_args(argv)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verify = _cli()
    assert verify.run(_parse(["sqrt-e4m3fn-rto", "--json", "--scheduler", "sync"])) == 0
    assert json.loads(capsys.readouterr().out)["cases"] == 256
    assert verify.run(_parse(["--list"])) == 0
    assert "fma-e5m2-rtz" in capsys.readouterr().out
    res = tmp_path / "r"
    assert verify.run(_parse(["sqrt-bf16-rne", "--results", str(res), "--chunks", "4"])) == 0
    assert len((res / CHUNKS).read_text().splitlines()) == 4
    bad = [
        (["no-such"], "CAMPAIGN no-such: not a campaign"),
        ([], "CAMPAIGN: a campaign name is required"),
        (["sqrt-bf16-rne", "--chunks", "0"], "--chunks 0: expected 1 to 65536"),
        (["sqrt-bf16-rne", "--scheduler", "mpi"], "--scheduler mpi: expected"),
        (["sqrt-bf16-rne", "--results", str(res), "--chunks", "2"], "holds campaign"),
    ]
    for argv, msg in bad:
        with pytest.raises(ValueError, match=msg) as info:
            verify.run(_parse(argv))
        assert type(info.value).__name__ == "UsageError" and "\n" not in str(info.value)
    with pytest.raises(SystemExit) as ex:
        _parse(["sqrt-bf16-rne", "--chunks", "many"])
    assert ex.value.code == 2


@pytest.mark.parametrize(
    ("name", "index", "n"),
    [("cast-fp32-e4m3fn-rtz", 1017, 4096), ("cast-fp32-bf16-rna", 3000, 8192),
     ("fma-fp16-rup-boundary", 7, 64), ("add-fp16-rdown", 1234, 2**14),
     ("div-bf16-rto", 4321, 2**14), ("torch-mul-bf16", 999, 2**14)],
)  # fmt: skip
def test_chunks_of_big_campaigns_pass(name: str, index: int, n: int) -> None:
    """One chunk of each kind of big campaign (the full ones run from the CLI, not here)."""
    if name.startswith("torch"):
        pytest.importorskip("torch")
    r = evaluate_chunk(get_campaign(name), index, n)
    assert r.cases > 0 and r.counts == {}


def test_progress_line() -> None:
    buf = io.StringIO()
    bar = Progress("demo", 1000, 0, stream=buf, enabled=True)
    bar.update(500, force=True)
    bar.close()
    assert "demo:  50.0% 500/1000 cases" in buf.getvalue() and "cases/s, ETA" in buf.getvalue()
    quiet = io.StringIO()  # not a terminal: nothing is drawn
    Progress("demo", 10, 0, stream=quiet).update(10, force=True)
    assert quiet.getvalue() == ""

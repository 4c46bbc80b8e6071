"""``watch``'s module column: the innermost running module, in the forward and the backward,
the same whatever the process's string hashes are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import fpemu  # noqa: E402


class TwoEmbeddings(nn.Module):
    """A GPT's input: token and position embeddings summed (their inputs need no gradient:
    the tracker never sees them leave in the backward), dropout (``p = 0``: the identity, whose
    backward the tracker does not see leave either), then a nested block and a head."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(11, 8), nn.Embedding(5, 8)
        self.drop = nn.Dropout(p)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.head = nn.Linear(8, 11)

    def forward(self, idx: Any) -> Any:
        x = self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))
        return self.head(self.block(x))


def _rows(p: float = 0.0) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    net = TwoEmbeddings(p)
    idx = torch.randint(0, 11, (3, 5))
    with fpemu.watch() as w:
        net(idx).square().mean().backward()
    return w.report().rows


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_embedding_backwards_belong_to_their_own_embedding(p: float) -> None:
    rows = _rows(p)
    emb = {tuple(r["shape"]): r["module"] for r in rows if "embedding_dense" in r["op"]}
    # tok's weight gradient is 11 x 8, pos's 5 x 8 (before: both went to "drop" for p = 0,
    # and for p = 0.1 to whichever of the two names of equal length the set gave first)
    assert emb == {(11, 8): "tok", (5, 8): "pos"}
    fwd = {(r["op"], r["module"]) for r in rows if r["phase"] == "forward"}
    assert ("aten.addmm.default", "block.0") in fwd
    assert ("aten.relu.default", "block.1") in fwd
    assert ("aten.addmm.default", "head") in fwd


def test_module_column_does_not_depend_on_string_hashes() -> None:
    # the tracker keeps its running modules in a set, whose order follows the hashes
    code = (
        "import json, sys; sys.path.insert(0, 'tests'); import test_watch_modules as t; "
        "print(json.dumps([r['module'] for r in t._rows(0.1)]))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outs = []
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=root)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, cwd=root, check=True)  # fmt: skip
        outs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1] == outs[2]
    assert outs[0] == [r["module"] for r in _rows(0.1)]

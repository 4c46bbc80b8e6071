"""The plain-text summary of an ``emulate`` block: settings, op counts by name, recipe traces.

>>> _by_name({"aten.mm.default": 3, "aten.add.Tensor": 5})
'aten.add.Tensor 5, aten.mm.default 3'
"""

from __future__ import annotations

from typing import Any

__all__ = ["summary_text", "traces_text"]


def _by_name(counts: dict[str, int]) -> str:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k} {v}" for k, v in items)


def summary_text(em: Any) -> str:
    """The summary of :class:`fpemu.emulate.Emulation` ``em`` (what ``em.summary()`` returns)."""
    s, c = em.settings, em.counts
    where = "the whole block" if s["autocast"] else f"{c['regions']} region(s) of the program"
    lines = [
        f"policy {s['policy']} (compute {s['compute']}), model {s['model']}, "
        f"recipe {s['recipe'] or 'none'}, autocast: {where}, {c['casts']} policy casts",
        f"ops emulated: {c['emulated']}" + (f" ({_by_name(em.emulated)})" if em.emulated else ""),
        f"ops not emulated: {c['not_emulated']}"
        + (f", by name: {_by_name(em.not_emulated)}" if em.not_emulated else ""),
    ]
    if em.failed:
        lines.append(f"emulations failed (torch's value kept): {c['failed']}")
        lines += [f"  {k}: {v}" for k, v in sorted(em.failed.items())]
    for name, st in sorted(em.state.items()):
        lines.append(f"recipe state {name}: {st.describe()}")
    return "\n".join(lines)


def _series(values: list[float], *, most: int = 12) -> str:
    shown = values if len(values) <= most else values[: most // 2] + values[-most // 2 :]
    text = " ".join(f"{v:.4g}" for v in shown)
    return (
        text
        if len(values) <= most
        else text.replace(f"{shown[most // 2 - 1]:.4g} ", f"{shown[most // 2 - 1]:.4g} ... ", 1)
    )


def traces_text(em: Any) -> str:
    """Per Linear module and role, the amax and scale of every step (recipes only).

    MX/NVFP4 recipes have one scale per block: their scale trace reads ``nan``.
    """
    lines = []
    for name, st in sorted(em.state.items()):
        for role in ("input", "weight", "grad_output"):
            amax = st.trace(role, "amax")
            if amax:
                lines.append(f"{name} {role} amax: {_series(amax)}")
                lines.append(f"{name} {role} scale: {_series(st.trace(role, 'scale'))}")
    return "\n".join(lines)

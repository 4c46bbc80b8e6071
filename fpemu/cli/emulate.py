"""``fpemu emulate FILE.py:FUNC --policy P --model M [--recipe R]``: run your own function under
``fpemu.emulate`` and print what it returns, then a summary (ops emulated and not emulated
by name, policy casts, and for a recipe each Linear's amax and scale per step).

``FUNC`` takes no arguments; its torch code (model, loss, backward, optimizer, GradScaler) runs
unchanged with every ATen op's result replaced by fpemu's emulation. ``FILE.py``'s folder is
put first on ``sys.path``, as ``python FILE.py`` does. ``--autocast`` treats the whole call as
an autocast region (default: the policy applies inside the function's own ``torch.autocast``
regions only). Bad arguments are refused before torch is imported: one line, exit status 2.

>>> import argparse
>>> p = argparse.ArgumentParser(prog="fpemu emulate")
>>> configure(p)
>>> a = p.parse_args(["net.py:train", "--policy", "torch_cuda_bf16", "--model", "h100"])
>>> a.target, a.policy, a.model, a.recipe, a.autocast
('net.py:train', 'torch_cuda_bf16', 'h100', None, False)
"""

from __future__ import annotations

import argparse
from typing import Any

from fpemu.cli.errors import UsageError
from fpemu.cli.userfile import call_function, load_function

__all__ = ["configure", "load_function", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``emulate`` arguments to ``parser``."""
    parser.add_argument("target", metavar="FILE.py:FUNC",
                        help="a Python file and a function in it taking no arguments")  # fmt: skip
    parser.add_argument("--policy", required=True,
                        help="AMP preset (torch_cuda_fp16, torch_cuda_bf16, torch_cpu_bf16, "
                             "fp32, ...)")  # fmt: skip
    parser.add_argument("--model", default="fast",
                        help="accumulation model of every GEMM (fast, sequential, h100, "
                             "sm90.wgmma.bf16.f32, cdna3.mfma.f16.f32, ...)")  # fmt: skip
    parser.add_argument("--recipe", default=None,
                        help="FP8/MX/NVFP4 recipe of the Linear layers (te_delayed, te_mxfp8, "
                             "te_nvfp4, torchao_rowwise, deepseek_v3, ...)")  # fmt: skip
    parser.add_argument("--autocast", action="store_true",
                        help="the whole call is an autocast region")  # fmt: skip


def _check(args: argparse.Namespace) -> None:
    """Refuse bad settings before anything is imported or run."""
    from fpemu.amp.policy import POLICY_ALIASES, get_policy, preset_names  # noqa: PLC0415
    from fpemu.linalg import models  # noqa: PLC0415

    try:
        get_policy(args.policy)
    except ValueError:
        names = ", ".join([*preset_names(), *POLICY_ALIASES])
        raise UsageError(f"--policy {args.policy}: accepted {names}") from None
    if args.model not in models():
        raise UsageError(f"--model {args.model}: accepted an accumulation model "
                         "(fpemu tensorcore --list; e.g. fast, sequential, h100)")  # fmt: skip
    if args.recipe is not None:
        from fpemu.emulate.recipes import check_recipe  # noqa: PLC0415

        try:
            check_recipe(args.recipe)
        except ValueError as exc:
            accepted = str(exc).split("accepted: ", 1)[-1]
            raise UsageError(f"--recipe {args.recipe}: accepted {accepted}") from None


def _show(value: Any) -> str:
    """What the function returned, as text (a dict one ``key: value`` per line)."""
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v}" for k, v in value.items())
    return str(value)


def run(args: argparse.Namespace) -> int:
    """Run ``FUNC`` under emulate; print its result and the summary. 0, or 2 (bad arguments)."""
    _check(args)
    fn = load_function(args.target)
    try:
        import torch  # noqa: F401, PLC0415 - the one dependency of emulate
    except ModuleNotFoundError:
        raise UsageError(f"{args.target}: fpemu emulate needs PyTorch: pip install "
                         "'fpemu[torch]'") from None  # fmt: skip
    import fpemu.emulate as emulate_module  # noqa: PLC0415

    with emulate_module.emulate(policy=args.policy, model=args.model, recipe=args.recipe,
                                autocast=args.autocast) as em:  # fmt: skip
        result = call_function(fn, label="FILE.py:FUNC", target=args.target)
    if result is not None:
        print(_show(result))
    print(em.summary())
    from fpemu.emulate.summary import traces_text  # noqa: PLC0415

    if em.state:
        print(traces_text(em))
    return 0

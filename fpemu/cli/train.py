"""``fpemu train``: train a small MLP under a mixed-precision policy and print what happened.

>>> import argparse
>>> p = argparse.ArgumentParser(); configure(p)
>>> run(p.parse_args(["moons", "--steps", "2", "--hidden", "4", "--no-progress", "--json"]))
... # doctest: +ELLIPSIS
{...
0
"""

from __future__ import annotations

import argparse

from fpemu.amp.policy import preset_names
from fpemu.training import train
from fpemu.training.datasets import DATASETS


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpemu train``."""
    parser.add_argument("dataset", choices=list(DATASETS), help="data set (digits needs sklearn)")
    parser.add_argument("--policy", default="fp32", help=f"preset: {', '.join(preset_names())}")
    parser.add_argument(
        "--scaler",
        default="policy",
        help="'policy' (the framework's pairing), 'none', or a scaler name",
    )
    parser.add_argument("--hidden", type=int, nargs="+", default=[64], help="hidden widths")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--micro-batches", type=int, default=1, help="gradient accumulation")
    parser.add_argument("--clip", type=float, default=None, help="max gradient norm")
    parser.add_argument("--loss-weight", type=float, default=1.0, help="multiply the loss")
    parser.add_argument("--acc-model", default=None, help="override the accumulation model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    """Run ``fpemu train``; returns the exit status."""
    scaler = None if args.scaler == "none" else args.scaler
    r = train(args.dataset, hidden=tuple(args.hidden), policy=args.policy, scaler=scaler,
              steps=args.steps, lr=args.lr, optimizer=args.optimizer, seed=args.seed,
              batch_size=args.batch_size, micro_batches=args.micro_batches, clip=args.clip,
              loss_weight=args.loss_weight, acc_model=args.acc_model,
              progress=not args.no_progress)  # fmt: skip
    if args.json:
        print(r.to_json(indent=2))
        return 0
    print(f"policy {r.config['policy']}, scaler {r.config['scaler']}, {args.steps} steps")
    print(f"test accuracy {100 * r.final_accuracy:.1f}%  train accuracy "
          f"{100 * r.train_accuracy:.1f}%  final loss {r.final_loss:.4g}  "
          f"skipped {r.skipped_steps}")  # fmt: skip
    print("layer      zero%  subnormal%  overflow%  (after scaling | before scaling)")
    for layer, st in r.grad_stats.items():
        a, b = st["after_scaling"], st["before_scaling"]
        print(f"{layer:9s} {100 * a['zero']:6.2f} {100 * a['subnormal']:10.2f} "
              f"{100 * a['overflow']:9.2f}  | {100 * b['zero']:6.2f} {100 * b['subnormal']:6.2f} "
              f"{100 * b['overflow']:6.2f}")  # fmt: skip
    return 0

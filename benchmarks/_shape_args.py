"""The command line the shapes benchmarks share (``bench_shapes.py``, ``bench_shapes_django.py``).

Both time the same states of a request shape in pooled fresh processes; one parser keeps
their options the same, so a run of one can be repeated with the other's flags.
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

from benchmarks import _pg
from benchmarks._compare import add_options


def shape_arguments(doc: str, shape_names: Sequence[str], states: Sequence[str],
                    sample_rate: float) -> Optional[argparse.Namespace]:
    """The parsed arguments, or None when ``--list`` printed the contenders (nothing to run)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--only", action="append", choices=list(shape_names))
    parser.add_argument("--loop", metavar="SHAPE:STATE", help="serve one contender --calls times, untimed")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--list", action="store_true", help="name the contenders (SHAPE:STATE)")
    parser.add_argument("--sample-rate", type=float, default=sample_rate)
    add_options(parser, processes=5)
    _pg.add_option(parser)
    args = parser.parse_args()
    if args.list:
        print("\n".join(f"{shape}:{state}" for shape in shape_names for state in states))
        return None
    return args

"""Ranks of one machine in a torch.distributed gloo group, as the ground-truth workers run them
(torch_worker.py, cp_worker.py, moe_worker.py, node_limited_worker.py, hybrid_cp_worker.py, mamba_tp_worker.py).

    spawn_gloo(run, world, out, *args)

starts `world` processes (torch.multiprocessing.spawn), each joining a gloo group on a free port of
127.0.0.1, running `run(rank, world, *args)` and writing the dict it returns to OUT/rank<r>.json.
A worker script imports this module as a sibling (`from gloo_ranks import spawn_gloo`: run as a
script, its folder is sys.path[0], and spawn hands the children the parent's sys.path); spawn
pickles `_rank` and `run` by their module paths, so both stay top-level functions.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# A rank that raises leaves the others waiting in a collective: a gloo timeout turns that wait into
# an error in a minute and a half instead of a hang until the test's own limit.
TIMEOUT = timedelta(seconds=90)


def gloo_parser() -> argparse.ArgumentParser:
    """A worker script's command line: --world (ranks) and --out (the folder of rank<r>.json); a worker adds its own."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--out", required=True)
    return parser


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (the OS's choice), for the group's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_gloo(run: Callable[..., dict], world: int, out: str, *args: Any) -> None:
    """run(rank, world, *args) on `world` gloo ranks, each one's dict written to OUT/rank<r>.json."""
    mp.spawn(_rank, args=(world, free_port(), run, out, args), nprocs=world)


def _rank(rank: int, world: int, port: int, run: Callable[..., dict], out: str, args: tuple) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # the ranks share the machine's cores: one thread each, not `world` x all of them
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        result = run(rank, world, *args)
        dist.barrier()  # no rank leaves the group while another still sends to it
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))

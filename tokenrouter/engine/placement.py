"""Where the ranks of a tensor-parallel model run, and what they meet at: pure functions of the model spec,
shared by both engines' TP groups (engine/tp.py) and the sglang engine's rank bring-up (sglang_args.py)."""

from __future__ import annotations

import socket

from tokenrouter.config import ModelSpec

# a rank that stops answering fails the group's next collective after this long (our commands and, on the sglang
# engine, SGLang's own groups: its default would leave rank 0 waiting for hours on a rank that died mid-forward)
COLLECTIVE_TIMEOUT_S = 300

def rank_device(spec: ModelSpec, rank: int) -> str:
    """CPU ranks share the host; GPU ranks take consecutive devices from the model's own (cuda:K -> K + rank)."""
    if spec.device == "cpu":
        return "cpu"
    base = int(spec.device.split(":")[1]) if ":" in spec.device else 0
    return f"cuda:{base + rank}"


def rank_env(device: str) -> dict[str, str]:
    """The environment transformers' TP loading reads on this rank: it binds the rank to
    `cuda:$LOCAL_RANK` (distributed/utils.py `_bind_local_device`, called from `initialize_distributed_mesh`),
    so LOCAL_RANK is the device INDEX of this rank's device (a model on cuda:2 with tp 2: ranks 2 and 3), not
    the rank. Nothing on CPU (no binding there)."""
    if not device.startswith("cuda"):
        return {}
    return {"LOCAL_RANK": device.split(":")[1] if ":" in device else "0"}


def rank_ports(engine: str) -> list[int]:
    """What rank 0 picks for every rank before any starts: SGLang's rendezvous and NCCL ports (torch ranks use
    the file store)."""
    return [free_port(), free_port()] if engine == "sglang" else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

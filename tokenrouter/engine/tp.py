"""Tensor parallelism for the torch and sglang engines: one process per rank, rank 0 drives, the others mirror.

Why this shape: the subserver (or `tokenrouter generate`) stays one scheduler. It is rank 0; it starts ranks
1..N-1 as `python -m tokenrouter.engine.tp_worker` (a typed RankConfig as msgpack on stdin: children.spawn, no
pickle; the TP checks ran once before, in the process that planned the models: loader.check_tp), and every call that
changes KV state (step, release, truncate) is first broadcast to them as one msgpack frame over a gloo
group, then run on every rank: the model's TP layers make the forward itself collective (transformers' TP
plan for torch; SGLang's parallel linear layers for sglang, each rank an SGLang TpModelWorker as SGLang's own
scheduler processes hold), and each rank's KV pool holds its shard of the KV heads. Every rank applies the same
commands in the same order, so each holds the same requests at the same lengths (its allocations are a
function of that sequence): the batch shapes, and so the collectives, match. Queries (seq_len, tokens_free)
are answered locally. torch ranks meet at a file store in a private 0700 directory (no listening store port);
sglang ranks at the TCP port rank 0 picked (SGLang's own bootstrap), their commands on SGLang's TP CPU group.
A rank that dies makes rank 0's next call fail with EngineFailure, which stops the subserver.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgpack
import msgspec
import torch
import torch.distributed as dist

from tokenrouter.children import spawn
from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import (
    ALL_STEP_OUTPUTS,
    NO_STEP_OUTPUTS,
    Engine,
    EngineFailure,
    SamplingParams,
    StepItem,
    StepOutput,
    StepOutputs,
)
from tokenrouter.engine.placement import COLLECTIVE_TIMEOUT_S, rank_device, rank_env, rank_ports
from tokenrouter.errors import UserError, first_line

if TYPE_CHECKING:
    from tokenrouter.engine.torch_engine import TorchEngine

T = TypeVar("T")
STEP, RELEASE, TRUNCATE, CLOSE = 1, 2, 3, 4


class RankConfig(msgspec.Struct, frozen=True):
    """What a worker rank needs (msgpack on its stdin: children.spawn / decode_config), decided by rank 0."""

    spec: ModelSpec  # the model's spec as rank 0 has it (spec.tp: the world size)
    rank: int
    device: str  # this rank's device (placement.rank_device)
    store: str  # the file store's path (torch ranks)
    ports: list[int] = msgspec.field(default_factory=list)  # sglang ranks: [dist_port, nccl_port], picked by rank 0
    env: dict[str, str] = msgspec.field(default_factory=dict)  # set before loading (placement.rank_env)

    @classmethod
    def of(cls, spec: ModelSpec, rank: int, store: str, ports: list[int]) -> RankConfig:
        """Rank `rank`'s config, its placement decided here (by rank 0) once."""
        device = rank_device(spec, rank)
        return cls(spec, rank, device, store, ports, rank_env(device))


def init_group(cfg: RankConfig) -> Any:
    """Join the process group (NCCL for GPU forwards, gloo on CPU) and return the gloo group for commands."""
    os.environ.update(cfg.env)  # before transformers loads this rank's shard
    if cfg.device.startswith("cuda"):
        torch.cuda.set_device(cfg.device)
    backend = "nccl" if cfg.device.startswith("cuda") else "gloo"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # rank-to-rank traffic stays on loopback
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    dist.init_process_group(backend, init_method=f"file://{cfg.store}", rank=cfg.rank, world_size=cfg.spec.tp,
                            timeout=timeout)
    return dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD


def build_rank_engine(cfg: RankConfig) -> TorchEngine:
    """This rank's TorchEngine over its shard (every rank runs the same code, so the collectives pair up)."""
    from tokenrouter.engine.torch_engine import TorchEngine

    return TorchEngine.from_spec(replace(cfg.spec, device=cfg.device), tp=cfg.spec.tp)


def start_rank(cfg: RankConfig) -> tuple[Any, Engine]:
    """Join the group and load this rank's shard: (the group commands travel on, the rank's engine)."""
    if cfg.spec.engine == "sglang":
        from tokenrouter.engine.sglang_engine import SGLangEngine

        engine = SGLangEngine(cfg.spec, rank=cfg.rank, ports=cfg.ports)
        return engine.command_group(), engine
    group = init_group(cfg)
    return group, build_rank_engine(cfg)


def send_command(group: Any, command: list[Any]) -> None:
    frame = torch.frombuffer(bytearray(msgpack.packb(command, use_bin_type=True)), dtype=torch.uint8)
    dist.broadcast(torch.tensor([frame.numel()], dtype=torch.int64), src=0, group=group)
    dist.broadcast(frame, src=0, group=group)


def recv_command(group: Any) -> list[Any]:
    size = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(size, src=0, group=group)
    frame = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(frame, src=0, group=group)
    return msgpack.unpackb(frame.numpy().tobytes(), raw=False)


def items_to_wire(items: list[StepItem]) -> list[Any]:
    return [[it.rid, it.token_ids, [it.sampling.temperature, it.sampling.top_p, it.sampling.top_k, it.sampling.seed],
             it.prompt_len, list(it.banned_ids)] for it in items]


def items_from_wire(wire: list[Any]) -> list[StepItem]:
    return [StepItem(rid, list(ids), SamplingParams(*s), plen, tuple(banned)) for rid, ids, s, plen, banned in wire]


def apply_command(engine: Engine, command: list[Any]) -> bool:
    """Run one broadcast command on a worker rank; False once told to close."""
    op = command[0]
    if op == STEP:
        engine.step(items_from_wire(command[1]), NO_STEP_OUTPUTS)  # rank 0 returns what the caller reads
    elif op == RELEASE:
        engine.release(command[1])
    elif op == TRUNCATE:
        engine.truncate(command[1], command[2])
    elif op == CLOSE:
        return False
    else:
        raise ValueError(f"unknown TP command {op!r}")
    return True


class TensorParallelEngine(Engine):
    """Rank 0 of a TP group: forwards every state change to the worker ranks, then runs it on its own shard."""

    def __init__(self, spec: ModelSpec) -> None:
        """`spec` passed loader.check_tp in the process that planned the models (engine/factory.py:prepare_models)."""
        self._dir: Path | None = Path(tempfile.mkdtemp(prefix="tokenrouter-tp-"))  # 0700
        self.procs: list[subprocess.Popen] = []
        self.group: Any = None
        self.broken = False  # a broadcast call failed on rank 0: the group is out of step
        self.name = spec.name
        store = str(self._dir / "store")
        ports = rank_ports(spec.engine)
        ranks = [RankConfig.of(spec, rank, store, ports) for rank in range(spec.tp)]
        # CUDA's current device is per thread, and rank 0 starts in a helper thread while the subserver (or
        # lock-step's driver) steps it in another; SGLang builds per-step tensors on the bare "cuda" device
        self.cuda_device = ranks[0].device if spec.device.startswith("cuda") else None
        self._bound_threads: set[int] = set()
        try:
            for cfg in ranks[1:]:
                self.procs.append(spawn("tokenrouter.engine.tp_worker", cfg))
            self.group, self.inner = self._start_rank0(ranks[0])
        except BaseException:
            self.close()
            raise
        self.vocab_size = self.inner.vocab_size
        self.hidden_size = self.inner.hidden_size
        self.eos_token_ids = self.inner.eos_token_ids
        self.device = self.inner.device
        self.max_positions = self.inner.max_positions
        self.tokenizer = getattr(self.inner, "tokenizer", None)

    def _start_rank0(self, cfg: RankConfig) -> tuple[Any, Engine]:
        """Rendezvous and load in a thread while watching the workers: a rank that fails to start (bad model,
        import error) ends start-up with one line at once, instead of a rendezvous that waits for it."""
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["ok"] = start_rank(cfg)
            except BaseException as exc:
                done["error"] = exc

        thread = threading.Thread(target=run, name="tp-rank0-start", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            failed = [(r, p.returncode) for r, p in enumerate(self.procs, 1) if p.poll() not in (None, 0)]
            if failed and thread.is_alive():
                rank, code = failed[0]
                raise UserError(f"model {self.name!r}: tensor-parallel rank {rank} failed to start (exit code {code})")
        if "error" in done:
            raise done["error"]
        return done["ok"]

    def _broadcast(self, command: list[Any]) -> None:
        dead = [p.pid for p in self.procs if p.poll() is not None]
        if dead:
            raise EngineFailure(f"model {self.name!r}: tensor-parallel rank process(es) {dead} exited")
        try:
            send_command(self.group, command)
        except RuntimeError as exc:
            self.broken = True
            raise EngineFailure(f"model {self.name!r}: tensor-parallel group failed: {exc}") from None

    def bind_thread(self) -> None:
        """Make rank 0's GPU the current CUDA device of the calling thread (once per thread)."""
        thread = threading.get_ident()
        if self.cuda_device is not None and thread not in self._bound_threads:
            torch.cuda.set_device(self.cuda_device)
            self._bound_threads.add(thread)

    def step(self, items: list[StepItem], outputs: StepOutputs = ALL_STEP_OUTPUTS) -> StepOutput:
        self.bind_thread()
        if items:
            self.inner.check_step(items)  # a bad request fails here, alone, before any rank has seen the step
        self._broadcast([STEP, items_to_wire(items)])
        return self._mirrored("step", lambda: self.inner.step(items, outputs))

    def release(self, rid: str) -> None:
        self.bind_thread()
        if self.inner.holds(rid):  # the runtime releases ids it never stepped too: no broadcast for those
            self._broadcast([RELEASE, rid])
            self._mirrored("release", lambda: self.inner.release(rid))
        else:
            self.inner.release(rid)

    def truncate(self, rid: str, length: int) -> None:
        self.bind_thread()
        self._broadcast([TRUNCATE, rid, length])
        self._mirrored("truncate", lambda: self.inner.truncate(rid, length))

    def _mirrored(self, what: str, call: Callable[[], T]) -> T:
        """Run on rank 0 what every rank was just told to run. Any failure now is the ENGINE's, never a
        request's: the other ranks ran (or sit inside) the same collectives, so rolling back and re-stepping
        here alone (the subserver's per-request isolation) would desync the group or hang it. An OOM is the
        usual case, and it is asymmetric when rank 0 shares its GPU with another model."""
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - whatever it was, the ranks no longer agree
            self.broken = True  # close() kills the workers: one may sit in this step's collective, deaf to CLOSE
            dead = [p.pid for p in self.procs if p.poll() is not None]
            why = f"rank process(es) {dead} exited" if dead else "the ranks can no longer be assumed in step"
            raise EngineFailure(f"model {self.name!r}: tensor-parallel {what} failed on rank 0 after it was "
                                f"broadcast ({type(exc).__name__}: {first_line(exc)}); {why}") from None

    def seq_len(self, rid: str) -> int:
        return self.inner.seq_len(rid)

    def tokens_free(self) -> int:
        return self.inner.tokens_free()

    def tokens_used(self) -> int:
        return self.inner.tokens_used()

    def can_fit(self, rid: str, num_new_tokens: int) -> bool:
        return self.inner.can_fit(rid, num_new_tokens)

    def input_embeddings(self) -> torch.nn.Embedding | None:
        return self.inner.input_embeddings()

    def close(self) -> None:
        """Tell the ranks to stop (if the group is up), then make sure they are gone. Safe to call twice."""
        if self.group is not None and not self.broken and all(p.poll() is None for p in self.procs):
            try:
                send_command(self.group, [CLOSE])
            except RuntimeError:
                pass
        self.group = None
        for p in self.procs:
            if self.broken and p.poll() is None:
                p.kill()  # it may be blocked in a collective rank 0 will never join
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if dist.is_initialized():
            dist.destroy_process_group()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

"""An engine in a process of its own, driven from another: lock-step's peer models on engines that allow one
instance per process (sglang), as the official R2R code ran its large model in worker processes.

Why: lock-step is one driver in one process; SGLang keeps process-wide state (its parallel groups, its
server-args dict), so a second sglang engine in the same process cannot start. The driver keeps the entry model
in its own process (the router reads its hidden states, logits and embedding locally) and reaches each other
model through this proxy: `python -m tokenrouter.engine.remote` builds the engine (a TP group too) and answers
one msgpack frame per call over its stdin / stdout (its own prints go to stderr), no pickle. Step outputs cross
as float32 bytes, only those the caller asks for. The host dies with its parent; a host that exits makes the
next call an EngineFailure.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from typing import IO, Any

import msgspec

from tokenrouter.children import child_env, decode_config, die_with_parent
from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import ALL_STEP_OUTPUTS, Engine, EngineFailure, StepItem, StepOutput, StepOutputs
from tokenrouter.errors import UserError

_HEADER = struct.Struct("<I")


class Call(msgspec.Struct):
    """One engine call: `op` is step / release / truncate / seq_len / tokens_free / tokens_used / embeddings /
    close."""

    op: str
    items: list[StepItem] = []
    outputs: list[str] = []
    rid: str = ""
    length: int = 0


class Tensor(msgspec.Struct):
    shape: list[int]
    data: bytes  # float32, C order


class Reply(msgspec.Struct):
    """A call's result, or why it failed (`error`, with `kind`: user | value | engine)."""

    value: Any = None
    next_tokens: list[int] = []
    logits: Tensor | None = None
    hidden: Tensor | None = None
    weight: Tensor | None = None  # `embeddings`: the input embedding's weight
    error: str = ""
    kind: str = ""


class Ready(msgspec.Struct):
    eos_token_ids: list[int]
    vocab_size: int
    hidden_size: int
    max_positions: int | None
    device: str


def _send(fh: IO[bytes], payload: bytes) -> None:
    fh.write(_HEADER.pack(len(payload)) + payload)
    fh.flush()


def _receive(fh: IO[bytes]) -> bytes | None:
    head = fh.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    body = fh.read(size)
    return body if len(body) == size else None


def _tensor(value: Any) -> Tensor | None:
    if value is None:
        return None
    cpu = value.detach().float().cpu().contiguous()
    return Tensor(list(cpu.shape), cpu.numpy().tobytes())


def _from_tensor(t: Tensor | None) -> Any:
    if t is None:
        return None
    import numpy as np
    import torch

    return torch.from_numpy(np.frombuffer(t.data, dtype=np.float32).copy()).reshape(t.shape)


class RemoteEngine(Engine):
    """The `Engine` of `spec`, built and run in a child process (see the module docstring)."""

    def __init__(self, spec: ModelSpec) -> None:
        self.name = spec.name
        self._proc: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-m", "tokenrouter.engine.remote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=child_env())
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._to, self._from = self._proc.stdin, self._proc.stdout
        try:
            _send(self._to, msgspec.msgpack.encode(spec))  # typed: decoded once by the host (decode_config)
            self._reply_decoder = msgspec.msgpack.Decoder(Reply)
            ready = msgspec.convert(self._reply().value, Ready)
        except BaseException:
            self.close()
            raise
        self.eos_token_ids = tuple(ready.eos_token_ids)
        self.vocab_size, self.hidden_size = ready.vocab_size, ready.hidden_size
        self.max_positions, self.device = ready.max_positions, ready.device

    def _reply(self) -> Reply:
        body = _receive(self._from) if self._proc is not None else None
        if body is None:
            code = self._proc.poll() if self._proc is not None else None
            raise EngineFailure(f"model {self.name!r}: its engine process exited (status {code})")
        reply = self._reply_decoder.decode(body)
        if reply.error:
            raise {"user": UserError, "value": ValueError}.get(reply.kind, EngineFailure)(reply.error)
        return reply

    def _call(self, call: Call) -> Reply:
        if self._proc is None:
            raise EngineFailure(f"model {self.name!r}: engine closed")
        try:
            _send(self._to, msgspec.msgpack.encode(call))
        except (BrokenPipeError, ValueError):
            pass  # the reply read below reports the exit
        return self._reply()

    def step(self, items: list[StepItem], outputs: StepOutputs = ALL_STEP_OUTPUTS) -> StepOutput:
        reply = self._call(Call("step", items=list(items), outputs=sorted(outputs)))
        return StepOutput([it.rid for it in items], list(reply.next_tokens), _from_tensor(reply.logits),
                          _from_tensor(reply.hidden))

    def release(self, rid: str) -> None:
        self._call(Call("release", rid=rid))

    def truncate(self, rid: str, length: int) -> None:
        self._call(Call("truncate", rid=rid, length=length))

    def seq_len(self, rid: str) -> int:
        return int(self._call(Call("seq_len", rid=rid)).value)

    def tokens_free(self) -> int:
        return int(self._call(Call("tokens_free")).value)

    def tokens_used(self) -> int:
        return int(self._call(Call("tokens_used")).value)

    def input_embeddings(self) -> Any:
        weight = _from_tensor(self._call(Call("embeddings")).weight)
        if weight is None:
            return None
        import torch

        return torch.nn.Embedding.from_pretrained(weight, freeze=True)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            _send(self._to, msgspec.msgpack.encode(Call("close")))
            proc.wait(timeout=60)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        for fh in (self._to, self._from):
            try:
                fh.close()
            except OSError:
                pass


def _answer(engine: Engine, call: Call) -> Reply:
    if call.op == "step":
        out = engine.step(call.items, frozenset(call.outputs))  # type: ignore[arg-type]
        return Reply(next_tokens=list(out.next_tokens), logits=_tensor(out.logits), hidden=_tensor(out.hidden))
    if call.op == "release":
        engine.release(call.rid)
    elif call.op == "truncate":
        engine.truncate(call.rid, call.length)
    elif call.op == "seq_len":
        return Reply(value=engine.seq_len(call.rid))
    elif call.op in ("tokens_free", "tokens_used"):
        return Reply(value=getattr(engine, call.op)())
    elif call.op == "embeddings":
        emb = engine.input_embeddings()
        return Reply(weight=None if emb is None else _tensor(emb.weight))
    else:
        raise ValueError(f"unknown engine call {call.op!r}")
    return Reply()


def _failure(exc: BaseException) -> Reply:
    kind = "user" if isinstance(exc, UserError) else "value" if isinstance(exc, ValueError) else "engine"
    return Reply(error=f"{exc}" if kind != "engine" else f"{type(exc).__name__}: {exc}", kind=kind)


def main() -> None:
    """The host process: the spec on stdin, then one reply per call until `close` or EOF."""
    die_with_parent()
    channel_in, channel_out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the engine's libraries print goes to stderr, never into the channel
    from tokenrouter.engine.factory import build_engine

    engine = None
    try:
        spec = decode_config(_receive(channel_in) or b"", ModelSpec)
        engine = build_engine(spec)
        ready = Ready(list(engine.eos_token_ids), engine.vocab_size, engine.hidden_size, engine.max_positions,
                      str(engine.device))
        _send(channel_out, msgspec.msgpack.encode(Reply(value=msgspec.to_builtins(ready))))
    except Exception as exc:  # noqa: BLE001 - the parent raises it
        _send(channel_out, msgspec.msgpack.encode(_failure(exc)))
        return
    decoder = msgspec.msgpack.Decoder(Call)
    try:
        while (body := _receive(channel_in)) is not None:
            call = decoder.decode(body)
            if call.op == "close":
                break
            try:
                reply = _answer(engine, call)
            except Exception as exc:  # noqa: BLE001 - the caller decides what a failed call means
                reply = _failure(exc)
            _send(channel_out, msgspec.msgpack.encode(reply))
    finally:
        engine.close()


if __name__ == "__main__":
    main()

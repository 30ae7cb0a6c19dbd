"""The sglang engine: SGLang's ModelRunner (its kernels, KV pools, CUDA graphs, tensor parallel layers) driven
one forward at a time, with our subserver remaining the scheduler.

Why not SGLang's own scheduler: a routed request is parked here while another model generates for it and
resumes with an extend of the suffix it missed, at times only our runtime knows. So this engine owns the
request -> KV mapping (one row of SGLang's ReqToTokenPool per request, slots from its token allocator) and
builds one ForwardBatch per step: EXTEND for a mixed batch (a decode is an extend of one token, a resume an
extend whose prefix is the KV already held), DECODE when every item is a plain decode (what CUDA graphs replay).

With tp > 1 each rank is its own process holding this engine for its rank (engine/tp.py starts them and
broadcasts every step), as SGLang's own scheduler processes each hold a TpModelWorker: rank r publishes
world rank r on GPU base+r, and all ranks meet at the ports rank 0 picked. Where the placement comes from is
a pure function (sglang_args.rank_placement), tested on CPU; SGLang's TP collectives need CUDA.

Pinned to sglang==0.5.23 (its bootstrap and ForwardBatch signatures change between releases); imported lazily
so nothing else in tokenrouter needs SGLang. SGLang keeps process-wide state (published config, process
groups), so a process holds one live SGLang engine at a time: one per subserver (or TP rank).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import ALL_STEP_OUTPUTS, Engine, StepItem, StepOutput, check_step_items
from tokenrouter.engine.placement import rank_ports
from tokenrouter.engine.sampling import sample
from tokenrouter.engine.sglang_args import (
    decode_graph_replay,
    driver_problem,
    engine_server_args,
    eos_ids,
    nvidia_driver_version,
    rank_placement,
    server_env,
)
from tokenrouter.errors import CapacityError, UserError, first_line

if TYPE_CHECKING:
    from tokenrouter.engine.base import StepOutputs

SGLANG_VERSION = "0.5.23"
CPU_SHIM = Path(__file__).with_name("_sglang_cpu_shim")  # also put on SGLang servers' path
_state: dict[str, Any] = {"parallel_ready": False, "live": None}


class _BatchView:
    """The fields of a ScheduleBatch that `ForwardBatch.init_new` reads, for a batch built without SGLang's
    scheduler (no Req objects). Every feature we do not use (LoRA, multimodal, speculative, mamba, DP
    attention, logprobs, ...) reads as None, which init_new treats as off."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        return None


def _import_sglang(device: str) -> None:
    """Import SGLang, or say in one line how to get it. On CPU, put our vLLM import stand-in on the path."""
    if device == "cpu" and importlib.util.find_spec("vllm") is None and str(CPU_SHIM) not in sys.path:
        sys.path.append(str(CPU_SHIM))
    try:
        import sglang
    except ImportError:
        raise UserError(f"engine=sglang needs SGLang: `make sglang-venv` (pip install sglang=={SGLANG_VERSION}), "
                        "then run from .venv-sglang") from None
    if sglang.__version__ != SGLANG_VERSION:
        raise UserError(f"engine=sglang is written for sglang=={SGLANG_VERSION}, found {sglang.__version__}")
    if device != "cpu":
        problem = driver_problem(torch.version.cuda, nvidia_driver_version())
        if problem is not None:
            raise UserError(f"engine=sglang: {problem}")


def _model_runner(spec: ModelSpec, model_path: str, rank: int, ports: list[int], cuda_graph: bool) -> Any:
    """Bring up one SGLang model runner as `run_scheduler_process` does, minus the scheduler: publish the
    config with this rank's placement, build the process groups once per process (with tp > 1 every rank meets
    at ports[0]), load the worker, then its pools, attention backends and CUDA graphs, in the order SGLang's
    Scheduler.__init__ uses."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import bootstrap
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.runtime_context import SpawnRanks, get_device, publish
    from sglang.srt.server_args import ServerArgs

    place = rank_placement(spec, rank)
    os.environ.update(server_env(spec))  # before the bootstrap reads it
    args = ServerArgs(**engine_server_args(spec, model_path, place.base_gpu_id, cuda_graph))
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=place.world_rank, dp_rank=None,
                                                     gpu_id=place.gpu_id))
    dist_port, nccl_port = ports or rank_ports("sglang")
    if not _state["parallel_ready"]:  # SGLang refuses a second build of its process groups
        bootstrap.init_parallel_runtime(server_args=args, device=get_device().device, dist_port=dist_port)
        _state["parallel_ready"] = True
    bootstrap.init_layer_runtime(model_config=ModelConfig.from_server_args(args))
    worker = TpModelWorker(args, gpu_id=place.gpu_id, nccl_port=nccl_port)
    worker.model_runner.account_preloaded_weights(worker.preloaded_weights_bytes)
    worker.alloc_memory_pool()
    worker.init_attention_backends()
    worker.init_cuda_graphs()  # also sets up the eager runners when graphs are off
    return worker.model_runner


class SGLangEngine(Engine):
    def __init__(self, spec: ModelSpec, rank: int = 0, ports: list[int] | None = None) -> None:
        """One model (tp = 1), or rank `rank` of its TP group (built by engine/tp.py, which passes the group's
        `ports`: build_engine() builds the group)."""
        from tokenrouter.engine.loader import local_dir, resolve_source

        if spec.tp > 1 and not ports:  # tp checks (CUDA, heads): loader.check_tp, before the group started
            raise UserError(f"model {spec.name!r}: a tp={spec.tp} sglang engine is a group of rank processes; "
                            "build it with tokenrouter.engine.factory.build_engine")
        if spec.device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"model {spec.name!r}: device {spec.device!r} requested but CUDA is not available")
        if spec.kv_bytes is not None:
            raise UserError(f"model {spec.name!r}: the sglang engine sizes KV by kv_tokens or mem_fraction, "
                            "not kv_bytes")
        src = resolve_source(spec.source)
        if src.gguf_file:
            raise UserError(f"model {spec.name!r}: the sglang engine loads safetensors directories, not GGUF")
        if _state["live"] is not None:
            raise UserError(f"model {spec.name!r}: one sglang engine per process; close "
                            f"{_state['live']!r} first")
        _import_sglang(spec.device)
        if spec.device == "cpu":
            torch.set_num_threads(spec.threads)
        cuda_graph = spec.device != "cpu" and spec.cuda_graph  # no CUDA graphs on CPU
        place = rank_placement(spec, rank)
        self.name = spec.name
        self.tp = spec.tp
        location = local_dir(spec.source)  # a Hub id: its cached snapshot (no Hub lookup, and its EOS ids below)
        try:
            self.runner = _model_runner(spec, location, rank, list(ports or []), cuda_graph)
        except (OSError, ValueError, KeyError, NotImplementedError) as exc:  # a model SGLang cannot load or serve
            raise UserError(f"model {spec.name!r}: SGLang cannot load {location}: {first_line(exc)}") from exc
        if (self.runner.page_size or 1) != 1:  # paged allocators hand out whole pages (alloc_extend), not slots
            raise UserError(f"model {spec.name!r}: the sglang engine needs KV page size 1, SGLang chose "
                            f"{self.runner.page_size} (pick another attention backend)")
        _state["live"] = spec.name
        self.rows = self.runner.req_to_token_pool  # one row of KV slot ids per request
        self.slots = self.runner.token_to_kv_pool_allocator
        self.device = torch.device("cpu" if spec.device == "cpu" else f"cuda:{place.gpu_id}")
        cfg = self.runner.model_config
        self.vocab_size = int(cfg.vocab_size)
        self.hidden_size = int(cfg.hidden_size)
        self.max_len = self.max_positions = min(int(self.rows.max_context_len), int(cfg.context_len))
        self.eos_token_ids = eos_ids(location)
        self.tokenizer = None
        self._row: dict[str, int] = {}
        self._len: dict[str, int] = {}
        self._embedding: torch.nn.Embedding | None = None
        self.graph_steps = 0  # steps that replayed a DECODE CUDA graph (prefill graphs are off: sglang_args.py)

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> SGLangEngine:
        return cls(spec)

    # ---- the step -----------------------------------------------------------------------------------------
    def step(self, items: list[StepItem], outputs: StepOutputs = ALL_STEP_OUTPUTS) -> StepOutput:
        if not items:
            return StepOutput(rids=[], next_tokens=[])
        rids, counts, ids = self.check_step(items)
        before = [self._len.get(r, 0) for r in rids]
        new_rows = [r for r in rids if r not in self._row]
        try:
            logits, hidden = self._forward(rids, ids, before, counts)
        except BaseException:
            for rid, length in zip(rids, before, strict=True):
                self._shrink(rid, length)
            for rid in new_rows:
                self.release(rid)
            raise
        next_pos = [b + n for b, n in zip(before, counts, strict=True)]
        tokens = sample(logits, [it.sampling for it in items], next_pos, [it.banned_ids for it in items])
        return StepOutput.asked(rids, tokens, logits, hidden, outputs)

    def check_step(self, items: list[StepItem]) -> tuple[list[str], list[int], list[int]]:
        rids, counts, ids = check_step_items(items, self.vocab_size)
        self._check_fits(rids, [self._len.get(r, 0) for r in rids], counts)
        return rids, counts, ids

    def _check_fits(self, rids: list[str], before: list[int], counts: list[int]) -> None:
        long = [r for r, b, n in zip(rids, before, counts, strict=True) if b + n > self.max_len]
        if long:
            raise CapacityError(f"request {long[0]!r} would exceed the model's context of {self.max_len} tokens")
        if sum(counts) > self.slots.available_size():
            raise CapacityError(f"KV pool full: {sum(counts)} new tokens but only {self.slots.available_size()} "
                                "slots are free; release requests or enlarge the pool (kv_tokens / mem_fraction)")
        if sum(r not in self._row for r in rids) > self.rows.available_size():
            raise CapacityError(f"all {self.rows.size} SGLang request rows are in use; release requests first")

    @torch.inference_mode()
    def _forward(self, rids: list[str], ids: list[int], before: list[int],
                 counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new tokens' KV slots into each request's row, run one forward: (logits, last hidden)."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

        dev = self.device
        fresh = [r for r in rids if r not in self._row]
        if fresh:
            for rid, row in zip(fresh, self.rows.alloc_rows(len(fresh)), strict=True):
                self._row[rid] = int(row)
        rows = [self._row[r] for r in rids]
        seq = [b + n for b, n in zip(before, counts, strict=True)]
        total, size = sum(counts), len(rids)
        # The step's host inputs in ONE host-to-device copy, and every request's new KV slots written into its
        # row by ONE scatter (request i takes the next counts[i] slots: what per-request allocs would give),
        # not two small device ops per request.
        tok_rows = [row for row, n in zip(rows, counts, strict=True) for _ in range(n)]
        tok_cols = [col for b, n in zip(before, counts, strict=True) for col in range(b, b + n)]
        packed = torch.tensor(ids + rows + seq + tok_rows + tok_cols, dtype=torch.int64).to(dev, non_blocking=True)
        input_ids, pool_rows, seq_lens, rows_at, cols_at = packed.split([total, size, size, total, total])
        slots = self.slots.alloc(total)
        if slots is None:  # _check_fits counted the free slots: only a bug gets here
            raise CapacityError(f"KV pool: {total} slots could not be allocated")
        self.rows.req_to_token[rows_at, cols_at] = slots.to(torch.int32)
        for rid, length in zip(rids, seq, strict=True):  # only now: a failure above has nothing to roll back
            self._len[rid] = length
        decode = all(n == 1 for n in counts) and min(before) > 0
        batch = _BatchView(
            forward_mode=ForwardMode.DECODE if decode else ForwardMode.EXTEND,
            reqs=[],
            input_ids=input_ids,
            req_pool_indices=pool_rows,
            seq_lens=seq_lens,
            seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
            orig_seq_lens=seq_lens.to(torch.int32),
            seq_lens_sum=sum(seq),
            out_cache_loc=slots.to(dev),
            extend_lens=counts,
            prefix_lens=before,
            extend_num_tokens=sum(counts),
            extend_logprob_start_lens=counts,
            return_logprob=False,
            is_extend_in_batch=not decode,
        )
        fb = ForwardBatch.init_new(batch, self.runner, capture_hidden_mode=CaptureHiddenMode.LAST,
                                   return_hidden_states_before_norm=False)
        result = self.runner.forward(fb)
        self.graph_steps += decode_graph_replay(decode, result.can_run_graph)
        out = result.logits_output
        # The hidden state is captured whatever the caller asks: the CUDA graphs are captured with it
        # (return_hidden_states_mode="last"), and a step in another capture mode would run without a graph.
        return out.next_token_logits[:, : self.vocab_size].float(), out.hidden_states

    def _shrink(self, rid: str, length: int) -> None:
        """Return the KV slots of `rid` past its first `length` tokens to the allocator."""
        held = self._len.get(rid, 0)
        if rid not in self._row or length >= held:
            return
        slots = self.rows.req_to_token[self._row[rid], length:held].to(torch.int64)
        self.slots.free(slots.clone())
        self._len[rid] = length

    # ---- KV management ------------------------------------------------------------------------------------
    def release(self, rid: str) -> None:
        if rid not in self._row:
            return
        self._shrink(rid, 0)
        self.rows.free_rows([self._row.pop(rid)])
        self._len.pop(rid, None)

    def truncate(self, rid: str, length: int) -> None:
        if length == 0:
            self.release(rid)
        else:
            self._shrink(rid, length)

    def seq_len(self, rid: str) -> int:
        return self._len.get(rid, 0)

    def holds(self, rid: str) -> bool:
        return rid in self._row

    def command_group(self) -> Any:
        """The gloo group TP commands are broadcast on: SGLang's own TP CPU group (SGLang owns this process's
        torch.distributed world, so no second group is initialised)."""
        from sglang.srt.distributed.parallel_state import get_tp_group

        return get_tp_group().cpu_group

    def tokens_free(self) -> int:
        return int(self.slots.available_size())

    def tokens_used(self) -> int:
        return sum(self._len.values())

    def can_fit(self, rid: str, num_new_tokens: int) -> bool:
        if self.seq_len(rid) + num_new_tokens > self.max_len:
            return False
        return num_new_tokens <= self.tokens_free() and (rid in self._row or self.rows.available_size() > 0)

    def input_embeddings(self) -> torch.nn.Embedding:
        """The token embedding as a plain nn.Embedding over SGLang's weight (shared, not copied; tp=1: a TP
        rank holds a vocabulary shard only)."""
        if self.tp > 1:
            raise UserError(f"model {self.name!r}: a router that reads this model's input embeddings needs it "
                            f"at tp=1 (the sglang engine at tp={self.tp} holds a shard per rank)")
        if self._embedding is None:
            weight = self.runner.model.get_input_embeddings().weight[: self.vocab_size]
            self._embedding = torch.nn.Embedding.from_pretrained(weight, freeze=True)
        return self._embedding

    def close(self) -> None:
        for rid in list(self._row):
            self.release(rid)
        if _state["live"] == self.name:
            _state["live"] = None

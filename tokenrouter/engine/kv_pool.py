"""A paged KV cache shared by all requests of one engine.

Why paged: requests grow, get parked (another model generates for them) and shrink (truncate) at different
times; fixed-size pages keep fragmentation bounded and make freeing O(pages) without moving tensors.
Storage is one K and one V tensor per engine, [layers, slots, kv_heads, head_dim], slot = page * page_size +
offset; each request owns a page table (list of page ids) and a length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tokenrouter.errors import CapacityError


@dataclass(frozen=True)
class KVLayout:
    """Shape of one token's KV entry across all layers."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * itemsize


def pool_tokens(
    layout: KVLayout,
    device: torch.device,
    kv_tokens: int,
    kv_bytes: int | None = None,
    mem_fraction: float | None = None,
) -> int:
    """How many KV tokens to allocate: an explicit byte budget wins, then a fraction of free CUDA memory,
    else `kv_tokens`."""
    if kv_bytes is not None:
        return max(0, int(kv_bytes) // layout.bytes_per_token)
    if mem_fraction is not None and device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return max(0, int(free * float(mem_fraction)) // layout.bytes_per_token)
    return int(kv_tokens)


class KVPool:
    """Pages of `page_size` token slots; per-request page tables; all-or-nothing allocation."""

    def __init__(self, layout: KVLayout, num_tokens: int, page_size: int, device: torch.device) -> None:
        if page_size <= 0:
            raise CapacityError(f"KV page size must be positive, got {page_size}")
        num_pages = num_tokens // page_size
        if num_pages <= 0:
            raise CapacityError(
                f"KV budget of {num_tokens} tokens is below one page ({page_size} tokens); raise kv_tokens/kv_bytes"
            )
        self.layout = layout
        self.page_size = page_size
        self.num_pages = num_pages
        self.device = device
        shape = (layout.num_layers, num_pages * page_size, layout.num_kv_heads, layout.head_dim)
        try:
            # Zeroed: padded gathers read unwritten slots under a mask, and garbage could be NaN (NaN * 0 = NaN).
            self.k = torch.zeros(shape, dtype=layout.dtype, device=device)
            self.v = torch.zeros(shape, dtype=layout.dtype, device=device)
        except (RuntimeError, MemoryError) as exc:
            gib = 2 * self.k_bytes(shape, layout.dtype) / 2**30
            raise CapacityError(f"cannot allocate a KV pool of {gib:.2f} GiB on {device}: {exc}") from None
        self._free_pages: list[int] = list(range(num_pages - 1, -1, -1))  # pop() hands out low pages first
        self._tables: dict[str, list[int]] = {}
        self._lens: dict[str, int] = {}

    @staticmethod
    def k_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
        n = 1
        for s in shape:
            n *= s
        return n * torch.empty((), dtype=dtype).element_size()

    # ---- capacity -----------------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.num_pages * self.page_size

    def tokens_free(self) -> int:
        """Slots new tokens can take: free pages plus the unused tails of requests' last pages."""
        tails = sum(len(t) * self.page_size - self._lens[r] for r, t in self._tables.items())
        return len(self._free_pages) * self.page_size + tails

    def tokens_used(self) -> int:
        return sum(self._lens.values())

    def pages_needed(self, rid: str, num_new: int) -> int:
        have = len(self._tables.get(rid, ()))
        need = -(-(self._lens.get(rid, 0) + num_new) // self.page_size)
        return max(0, need - have)

    def can_fit(self, rid: str, num_new: int) -> bool:
        return self.pages_needed(rid, num_new) <= len(self._free_pages)

    def check_fits(self, growth: dict[str, int]) -> None:
        """Raise CapacityError unless every request in `growth` (rid -> new tokens) fits at once."""
        need = sum(self.pages_needed(rid, n) for rid, n in growth.items())
        if need > len(self._free_pages):
            tokens = sum(growth.values())
            raise CapacityError(
                f"KV pool full: {tokens} new tokens need {need} pages of {self.page_size} tokens but only "
                f"{len(self._free_pages)} of {self.num_pages} are free; release requests or enlarge the pool "
                f"(kv_tokens / kv_bytes)"
            )

    # ---- per request --------------------------------------------------------------------------------------
    def seq_len(self, rid: str) -> int:
        return self._lens.get(rid, 0)

    def __contains__(self, rid: str) -> bool:
        return rid in self._lens

    def alloc(self, rid: str, num_new: int) -> list[int]:
        """Extend `rid` by `num_new` tokens and return their slot ids (all-or-nothing)."""
        table = self._tables.setdefault(rid, [])
        start = self._lens.get(rid, 0)
        need = -(-(start + num_new) // self.page_size) - len(table)
        if need > len(self._free_pages):
            if not table:
                del self._tables[rid]
            self.check_fits({rid: num_new})
        for _ in range(need):
            table.append(self._free_pages.pop())
        self._lens[rid] = start + num_new
        return self._slots(table, start, start + num_new)

    def page_table(self, rid: str) -> list[int]:
        """Page ids of `rid`, in order (token i lives in slot table[i // page_size] * page_size + i % page_size)."""
        return self._tables.get(rid, [])

    def _slots(self, table: list[int], start: int, end: int) -> list[int]:
        ps = self.page_size
        return [table[i // ps] * ps + i % ps for i in range(start, end)]

    def truncate(self, rid: str, length: int) -> None:
        """Keep the first `length` tokens of `rid`; pages past them go back to the free list."""
        if rid not in self._lens:
            if length == 0:
                return
            raise KeyError(f"unknown request {rid!r}")
        cur = self._lens[rid]
        if length < 0 or length > cur:
            raise ValueError(f"cannot truncate request {rid!r} of {cur} tokens to {length}")
        table = self._tables[rid]
        keep = -(-length // self.page_size)
        self._free_pages.extend(reversed(table[keep:]))
        del table[keep:]
        self._lens[rid] = length

    def free(self, rid: str) -> None:
        """Forget `rid` and return all its pages. Unknown ids are ignored."""
        table = self._tables.pop(rid, None)
        self._lens.pop(rid, None)
        if table:
            self._free_pages.extend(reversed(table))

    def requests(self) -> list[str]:
        return list(self._lens)

    def close(self) -> None:
        """Forget every request and drop the K/V storage (its device memory goes back to the allocator)."""
        self._tables.clear()
        self._lens.clear()
        self._free_pages = []
        self.k = self.v = torch.empty(0, device=self.device)

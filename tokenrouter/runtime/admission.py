"""KV admission control: reserve each request's worst-case KV before it starts.

Why: a request admitted with its worst case (prompt + max_new_tokens + one page for page rounding) reserved
can always finish without preemption, so no step ever overflows the pool and fails the requests it holds; a
request whose worst case exceeds the whole pool is refused at once instead of waiting forever. Shared by the
subserver's scheduler and the lock-step baseline, so both admit by the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KVBudget:
    """Worst-case KV reservations against one model's pool of `capacity` tokens."""

    capacity: int
    page_size: int
    reserved: int = 0

    def need(self, prompt_len: int, max_new_tokens: int) -> int:
        return prompt_len + max_new_tokens + self.page_size

    def never_fits(self, prompt_len: int, max_new_tokens: int) -> str | None:
        """Why a request can never be admitted here (None: it can, once enough reservations are released)."""
        need = self.need(prompt_len, max_new_tokens)
        if need <= self.capacity:
            return None
        return (f"request needs {need} KV tokens (prompt {prompt_len} + max_new_tokens {max_new_tokens} + one "
                f"page) but the model holds {self.capacity}")

    def fits(self, need: int) -> bool:
        return self.reserved + need <= self.capacity

    def try_reserve(self, need: int) -> bool:
        if not self.fits(need):
            return False
        self.reserved += need
        return True

    def release(self, reserved: int) -> None:
        self.reserved -= reserved

"""NgramDrafter: guesses a sequence's next tokens from its own text (prompt-lookup decoding)."""

from __future__ import annotations

from collections.abc import Sequence


class NgramDrafter:
    """The tokens that followed the latest earlier occurrence of a sequence's last n tokens.

    Text that quotes its input (edits, extraction, code) or repeats itself continues the
    way it did before; the guess costs dict lookups, and the model verifies it (see
    worker.engine.speculation). The longest matching n in [min_n, max_n] wins: a longer
    match predicts better. The index grows with the sequence, O(new tokens) per call.
    """

    def __init__(self, min_n: int = 2, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n} and {max_n}")
        self.min_n, self.max_n = min_n, max_n
        # For each n: n-gram → the position just after its latest occurrence.
        self._after: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(min_n, max_n + 1)
        }
        self._indexed = 0  # occurrences ending at positions <= this are in the index

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to `k` tokens likely to follow `tokens`; [] when its last tokens are new."""
        end = len(tokens)
        # Occurrences ending before `end` only: the suffix itself would predict nothing.
        self._index(tokens, end - 1)
        if k < 1:
            return []
        for n in range(min(self.max_n, end - 1), self.min_n - 1, -1):
            start = self._after[n].get(tuple(tokens[end - n : end]))
            if start is None:
                continue
            draft: list[int] = []
            while len(draft) < k:
                pos = start + len(draft)
                # A loop shorter than k goes round again through the draft itself.
                draft.append(tokens[pos] if pos < end else draft[pos - end])
            return draft
        return []

    def _index(self, tokens: Sequence[int], last: int) -> None:
        for stop in range(self._indexed + 1, last + 1):
            for n, table in self._after.items():
                if stop >= n:
                    table[tuple(tokens[stop - n : stop])] = stop
        self._indexed = max(self._indexed, last)

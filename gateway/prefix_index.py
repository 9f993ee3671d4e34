"""ApproxPrefixIndex: which prompt prefixes a worker has seen, as chained hashes of text blocks."""

from __future__ import annotations

from collections import OrderedDict

# The gateway never tokenizes, so it tracks prompt *text* in fixed-size character blocks,
# each keyed by a hash chained over the previous block's: a block is present only if the
# whole text before it was sent too. It approximates the worker's KV prefix cache; a wrong
# guess costs only cache hits, never correctness.
BLOCK_CHARS = 64


def block_hashes(text: str, block_chars: int = BLOCK_CHARS) -> list[int]:
    """Chained hashes of the full blocks of `text`."""
    hashes = []
    previous = 0
    for start in range(0, len(text) - block_chars + 1, block_chars):
        previous = hash((previous, text[start : start + block_chars]))
        hashes.append(previous)
    return hashes


class ApproxPrefixIndex:
    """The blocks recently sent to one worker, least recently used dropped first."""

    def __init__(self, max_blocks: int = 200_000) -> None:
        if max_blocks < 1:
            raise ValueError(f"max_blocks must be >= 1, got {max_blocks}")
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: list[int]) -> int:
        """How many leading blocks of a prompt this worker has seen."""
        matched = 0
        for block in hashes:
            if block not in self._blocks:
                break
            matched += 1
        return matched

    def insert(self, hashes: list[int]) -> None:
        for block in hashes:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)

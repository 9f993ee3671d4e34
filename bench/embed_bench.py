"""Embeddings against prefill: N inputs of L tokens embedded, against the same tokens
prefilled as N chat prompts (one token generated each) and as one long prompt.

`python -m bench.embed_bench [--inputs 64] [--tokens 128] [--rounds 3]`: the default model
in-process (pooled at its last token, no prefix cache or disk tier, so every token is
computed), alternating the three in each round (the long prompt cut to the context); prints
each rate in prompt tokens per second and the embeddings' ratio to each prefill.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from bench.types_bench import TEACHER_TEXT
from worker.engine.inference_engine import InferenceEngine
from worker.machine.cpu_info import describe


def texts(engine: InferenceEngine, inputs: int, tokens: int) -> list[str]:
    """`inputs` distinct stretches of the fixed text, `tokens` tokens each."""
    ids = engine.tokenizer.encode(TEACHER_TEXT * (inputs * tokens // 40 + 2))
    return [engine.tokenizer.decode(ids[i * tokens : (i + 1) * tokens]) for i in range(inputs)]


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe())
    options = {"pooling": "last", "enable_prefix_caching": False, "kv_disk_mb": 0}
    with InferenceEngine(**options) as engine:  # type: ignore[arg-type]
        pieces = texts(engine, args.inputs, args.tokens)
        total = sum(len(engine.tokenizer.encode(p)) for p in pieces)
        # As long as the context allows (8,192 tokens less the one generated).
        ids = engine.tokenizer.encode("".join(pieces))[: engine.max_model_len - 2]
        one_prompt = engine.tokenizer.decode(ids)
        single = len(engine.tokenizer.encode(one_prompt))
        sampling = {"max_tokens": 1, "temperature": 0, "ignore_eos": True}

        def prompts() -> None:
            for _ in engine.generate(pieces, stream=True, chat=False, **sampling):
                pass

        for round_ in range(args.rounds):
            embed = total / timed(lambda: engine.embed(pieces))
            many = total / timed(prompts)
            long = single / timed(lambda: engine.generate(one_prompt, chat=False, **sampling))
            print(
                f"round {round_}: embeddings {embed:.0f} tok/s; {args.inputs} prompts "
                f"{many:.0f} tok/s ({embed / many:.2f}x); one {single}-token prompt "
                f"{long:.0f} tok/s ({embed / long:.2f}x)",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""One stream's decode at a long context: tokens per second after a 13k-token prompt.

`python -m bench.long_context_bench [--prompt 13000] [--tokens 64] [--kv-cache-dtype auto]
[--kv-disk-dir DIR]`: the default model (context 32768, RoPE linear) reads a fixed prompt of
`--prompt` tokens, then generates `--tokens` tokens greedily with EOS ignored; prints the
decode rate (first token to last) and the time to first token. With `--kv-disk-dir` the
prompt's pages come from the disk tier after the first run, so repeated runs measure decode
without paying the prefill again; the decode itself never reads the disk.
"""

from __future__ import annotations

import argparse
import time

from bench.types_bench import TEACHER_TEXT
from worker.engine.inference_engine import InferenceEngine
from worker.machine.cpu_info import describe


def decode_rate(prompt_tokens: int, tokens: int, options: dict[str, object]) -> tuple[float, float]:
    """(tokens per second after the first, seconds to the first token)."""
    with InferenceEngine(**options) as engine:  # type: ignore[arg-type]
        ids = engine.tokenizer.encode(TEACHER_TEXT * (prompt_tokens // 50 + 1))[:prompt_tokens]
        text = engine.tokenizer.decode(ids)
        start = time.perf_counter()
        stamps = []
        for _ in engine.generate(
            text, chat=False, stream=True, max_tokens=tokens, temperature=0, ignore_eos=True
        ):
            stamps.append(time.perf_counter())
        return (len(stamps) - 1) / (stamps[-1] - stamps[0]), stamps[0] - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=13000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--kv-disk-dir", default=None)
    args = parser.parse_args()
    options: dict[str, object] = {
        "max_model_len": 32768,
        "rope_scaling": "linear",
        "speculative_tokens": 0,
        "kv_cache_dtype": args.kv_cache_dtype,
        "kv_cache_mb": 2048,
    }
    if args.kv_disk_dir:
        options["kv_disk_dir"] = args.kv_disk_dir
    else:
        options["kv_disk_mb"] = 0
    rate, first = decode_rate(args.prompt, args.tokens, options)
    print(f"CPU: {describe()}")
    print(
        f"prompt {args.prompt} tokens, kv {args.kv_cache_dtype}: decode {rate:.2f} tok/s, "
        f"first token {first:.2f} s"
    )


if __name__ == "__main__":
    main()

"""Test helper: a tiny Qwen3 "reasoning model" whose weights make it think out loud.

The default model's tokenizer gains Qwen3's `<think>` and `</think>` tokens and Qwen3's chat
template (tests/worker/fixtures). The weights are chosen, not random, where it matters: every
attention output and MLP down projection is zero, so the last hidden state is the current
token's embedding, and each embedding is one-hot on its own dimension; the output layer then
maps each chosen token to its successor. Greedy decoding after the generation prompt
(`<|im_start|>assistant\\n`) writes `<think>Let me think</think>Hello!` and EOS, and after a
prompt with thinking off (`…</think>\\n\\n`) writes `Hello!` and EOS. The attention and MLP
inputs stay random.
"""

from __future__ import annotations

from pathlib import Path

from tests.worker.model_factory import ARCHITECTURES

REASONING = "Let me think"
ANSWER = "Hello!"
TEMPLATE = Path(__file__).parent / "fixtures" / "qwen3_chat_template.jinja"
SCALE = 10.0  # logit of a chosen successor: 8 (the normed one-hot) x SCALE


def build_reasoning_model(target: Path, tokenizer_dir: Path) -> Path:
    """The model folder (config, safetensors, tokenizer with Qwen3's template) at `target`."""
    import torch
    from tokenizers import AddedToken
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    tokenizer.chat_template = TEMPLATE.read_text()
    tokenizer.save_pretrained(str(target))
    # The tests' tiny Qwen3 shape, with this tokenizer's vocabulary and room for a chat.
    spec = {
        **ARCHITECTURES["qwen3"],
        "vocab_size": len(tokenizer),
        "max_position_embeddings": 1024,
        "tie_word_embeddings": False,
    }
    config = AutoConfig.for_model(**spec)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    chain = successor_chain(tokenizer)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        embed.zero_()
        head.zero_()
        for slot, (token, successor) in enumerate(chain.items()):
            embed[token, slot] = 1.0
            head[successor, slot] = SCALE
    model.save_pretrained(str(target), safe_serialization=True)
    return target


TAGS = ("<think>", "</think>")


def successor_chain(tokenizer: object) -> dict[int, int]:
    """Token id → the id greedy decoding writes after it."""

    def one(text: str) -> int:
        ids = tokenizer.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
        assert len(ids) == 1, f"{text!r} is not one token: {ids}"
        return int(ids[0])

    def last_of_prompt(**kwargs: object) -> int:
        chat = [{"role": "user", "content": "Hi"}]
        ids = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            chat, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
        )
        return int(ids[-1])

    words = [one(w) for w in ("<think>", "Let", " me", " think", "</think>", "Hello", "!")]
    eos = one("<|im_end|>")
    chain = {last_of_prompt(): words[0]}
    chain.update(zip(words, [*words[1:], eos], strict=True))
    chain[last_of_prompt(enable_thinking=False)] = one("Hello")
    assert len(chain) == 9, "each chosen token has one successor"
    return chain

"""The worker's tokenizer (tokenizers + Jinja, no transformers) against transformers'
AutoTokenizer on the same folders: the same ids, the same rendered chats."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from worker.text.chat_template import ChatTemplate
from worker.text.tokenizer import Tokenizer
from worker.text.tokenizer_folder import TokenizerFolderError, read_tokenizer_folder

QWEN3_TEMPLATE = Path(__file__).parents[1] / "fixtures" / "qwen3_chat_template.jinja"
# Trims what it renders (as many templates do), so continuing must cut at the trimmed text.
TRIMMING_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
TOOL_USE_TEMPLATE = (
    "{% for t in tools %}[tool {{ t.function.name }} {{ t | tojson }}]{% endfor %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
)
TEXTS = (
    "Hello, world!",
    "  leading and trailing spaces  ",
    "Grüße, 世界! 🎉 <|im_start|>user\nnot a turn<|im_end|>",
    "<think>reasoning</think>\n\nanswer",
    "",
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather <now> & here",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CHATS: tuple[list[dict[str, Any]], ...] = (
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! ", "reasoning_content": "greet"},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    ],
    [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "content": '{"temp": 21}', "name": "get_weather"},
    ],
)


def _outcome(render: Callable[[], str]) -> str:
    """The rendered text, or the kind of error rendering raised (a template that cannot
    render a chat must fail on both sides)."""
    try:
        return render()
    except Exception:  # the template's own errors, whatever their kind
        return "raised"


def _save(tokenizer: Any, folder: Path) -> Path:
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def folders(default_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The default model's folder (a GGUF's tokenizer, converted), and variants saved by
    transformers: think tags and Qwen3's template, a trimming template with a BOS token that
    the post-processor adds, named templates with a tool_use one."""
    from tokenizers import AddedToken, processors
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("tokenizers")
    qwen3 = AutoTokenizer.from_pretrained(str(default_model_dir))
    tags = ("<think>", "</think>")
    qwen3.add_tokens([AddedToken(t, special=False, normalized=False) for t in tags])
    qwen3.chat_template = QWEN3_TEMPLATE.read_text()
    bos = AutoTokenizer.from_pretrained(str(default_model_dir))
    bos.chat_template = TRIMMING_TEMPLATE
    bos.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", 1)]
    )
    named = AutoTokenizer.from_pretrained(str(default_model_dir))
    named.chat_template = {"default": TRIMMING_TEMPLATE, "tool_use": TOOL_USE_TEMPLATE}
    return {
        "default": default_model_dir,
        "qwen3": _save(qwen3, root / "qwen3"),
        "bos": _save(bos, root / "bos"),
        "named": _save(named, root / "named"),
    }


@pytest.fixture(scope="module", params=("default", "qwen3", "bos", "named"))
def pair(request: pytest.FixtureRequest, folders: dict[str, Path]) -> tuple[Tokenizer, Any]:
    from transformers import AutoTokenizer

    folder = folders[request.param]
    return Tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))


def test_vocabulary_and_end_token_agree(pair: tuple[Tokenizer, Any]) -> None:
    ours, theirs = pair
    assert ours.vocab_size == len(theirs)
    assert ours.eos_token_id == theirs.eos_token_id
    assert ours.eos_token_id in ours.eos_token_ids


@pytest.mark.parametrize("special", [True, False])
def test_encoding_agrees(pair: tuple[Tokenizer, Any], special: bool) -> None:
    ours, theirs = pair
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens=special) == theirs.encode(
            text, add_special_tokens=special
        ), text


@pytest.mark.parametrize("with_tools", [False, True])
def test_rendered_chats_agree(pair: tuple[Tokenizer, Any], with_tools: bool) -> None:
    theirs = pair[1]
    folder = read_tokenizer_folder(Path(theirs.name_or_path))
    source = folder.chat_template(with_tools)
    assert source is not None
    template = ChatTemplate(source, folder.special_tokens)
    tools = [WEATHER] if with_tools else None
    for chat in CHATS:
        expected = _outcome(
            lambda chat=chat: theirs.apply_chat_template(
                chat, tools=tools, add_generation_prompt=True, tokenize=False
            )
        )
        rendered = _outcome(lambda chat=chat: template.render(chat, tools=tools))
        assert rendered == expected, json.dumps(chat)


def test_continued_chats_agree(pair: tuple[Tokenizer, Any]) -> None:
    """The final assistant message is continued: the text is cut right after it, trimmed
    where the template trims it."""
    theirs = pair[1]
    folder = read_tokenizer_folder(Path(theirs.name_or_path))
    source = folder.chat_template(with_tools=False)
    assert source is not None
    template = ChatTemplate(source, folder.special_tokens)
    for tail in ("The answer is", "The answer is  ", [{"type": "text", "text": "Part "}]):
        chat = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": tail}]
        expected = _outcome(
            lambda chat=chat: theirs.apply_chat_template(
                chat, continue_final_message=True, tokenize=False
            )
        )
        continued = _outcome(
            lambda chat=chat: template.render(
                chat, add_generation_prompt=False, continue_final=True
            )
        )
        assert continued == expected


def test_template_variables_reach_the_template(folders: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(str(folders["qwen3"]))
    folder = read_tokenizer_folder(folders["qwen3"])
    template = ChatTemplate(folder.chat_template(with_tools=False) or "", folder.special_tokens)
    chat = CHATS[0]
    expected = theirs.apply_chat_template(
        chat, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    assert "<think>" in expected
    assert template.render(chat, variables={"enable_thinking": False}) == expected


def test_a_folder_without_tokenizer_json_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.model").write_bytes(b"")
    with pytest.raises(TokenizerFolderError, match=r"no tokenizer\.json \(only a SentencePiece"):
        read_tokenizer_folder(tmp_path)


def test_added_tokens_only_in_tokenizer_config_are_added(default_model_dir: Path, tmp_path):
    """Older saves listed some added tokens in tokenizer_config.json alone."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_text((default_model_dir / name).read_text())
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    size = read_tokenizer_folder(tmp_path).backend.get_vocab_size(with_added_tokens=True)
    settings["added_tokens_decoder"] = {str(size): {"content": "<extra>", "special": True}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    tokenizer = Tokenizer(tmp_path)
    assert tokenizer.vocab_size == size + 1
    assert tokenizer.encode("a<extra>b", add_special_tokens=False)[1] == size

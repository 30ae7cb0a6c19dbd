"""A character-level Hugging Face tokenizer built locally (no Hub), with a Qwen-style chat template.

Both the random tiny models of the tests and the trained local pair use it, so `AutoTokenizer.from_pretrained`
and `apply_chat_template` work on them exactly as on real Hub models.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

# From its module, not `transformers`' lazy table: that table lists it only when its availability probe finds
# `tokenizers` when transformers is first imported, which a CI run once saw fail with `tokenizers` imported.
from transformers.tokenization_utils_tokenizers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
DEFAULT_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """One token per character of `alphabet` plus the chat special tokens; EOS = <|im_end|>."""
    chars = list(dict.fromkeys(alphabet))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        bos_token=None,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok

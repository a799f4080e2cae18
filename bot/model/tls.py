"""How a process verifies its model servers over TLS: one trust store, read once.

The trust is the openai client's own default (the system's CA certificates, or the files
SSL_CERT_FILE / SSL_CERT_DIR name), for every request to a model server: the chat and
embedding client, the voice client, and the start-up questions of server_context.py. Reading a
CA bundle takes about 20 ms, and each client would otherwise read its own."""

from __future__ import annotations

import functools
import ssl

import httpx2
import openai


@functools.cache
def trust_store() -> ssl.SSLContext:
    return httpx2.create_ssl_context()


def http_client() -> openai.DefaultAsyncHttpxClient:
    """The HTTP client of one openai client, as the openai package makes its own, on the trust store."""
    return openai.DefaultAsyncHttpxClient(verify=trust_store())

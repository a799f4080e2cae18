"""The model server: the OpenAI-compatible client and token counting."""

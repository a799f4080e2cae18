"""Voice notes (SPEC 16): heard through an OpenAI-compatible /audio/transcriptions, answered in
text, and spoken back through /audio/speech in the character's voice."""

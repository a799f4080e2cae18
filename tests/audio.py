"""Real audio for the tests, made on this machine by libsndfile's Opus encoder (through
soundfile): never a file downloaded at run time. The fakes check what they receive with
`is_ogg_opus`, so no test passes on bytes nothing could play."""

from __future__ import annotations

import io

import numpy as np
import soundfile

RATE = 48_000


def ogg_opus(seconds: float = 2.0, pitch: float = 220.0) -> bytes:
    """A voice-like sound (a tone rising and falling in loudness, like syllables) as OGG/Opus."""
    t = np.arange(int(seconds * RATE)) / RATE
    syllables = 0.5 + 0.5 * np.sin(2 * np.pi * 3.0 * t)
    samples = 0.4 * syllables * np.sin(2 * np.pi * pitch * t)
    out = io.BytesIO()
    soundfile.write(out, samples.astype(np.float32), RATE, format="OGG", subtype="OPUS")
    return out.getvalue()


def is_ogg_opus(data: bytes) -> bool:
    """An Ogg stream (its capture pattern) whose first packet is an Opus header, that decodes."""
    if not (data.startswith(b"OggS") and b"OpusHead" in data[:128]):
        return False
    try:
        info = soundfile.info(io.BytesIO(data))
    except Exception:
        return False
    return info.format == "OGG" and info.subtype == "OPUS" and info.frames > 0


def seconds_of(data: bytes) -> float:
    return soundfile.info(io.BytesIO(data)).duration

"""What a voice note is, read by a maintained library: soundfile, whose wheels ship libsndfile
built with Ogg/Opus, tells its length and decodes it for its waveform. Nothing here parses a
codec. Only a waveform needs the audio decoded (about 5 ms of CPU a second of audio), so it is
made only for a platform that shows one (Discord), in blocks: a long note never sits decoded in
memory whole. Both libraries load with the first voice note: a bot without voice notes never
pays their start-up (a tenth of a second)."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import soundfile

WAVEFORM_POINTS = 256  # Discord's voice messages show up to 256 amplitudes


class NotAudio(ValueError):
    """Bytes no decoder could read as audio."""


def _opened(audio: bytes) -> soundfile.SoundFile:
    import soundfile

    try:
        return soundfile.SoundFile(io.BytesIO(audio))
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as problem:
        raise NotAudio(str(problem)) from None


def is_ogg_opus(audio: bytes) -> bool:
    """Whether the bytes are an Ogg stream of Opus audio that decodes."""
    try:
        with _opened(audio) as sound:
            return sound.format == "OGG" and sound.subtype == "OPUS" and sound.frames > 0
    except NotAudio:
        return False


def seconds_of(audio: bytes) -> float:
    """The audio's length in seconds, from its stream (nothing is decoded)."""
    with _opened(audio) as sound:
        if sound.frames <= 0 or sound.samplerate <= 0:
            raise NotAudio("no samples")
        return sound.frames / sound.samplerate


def describe(audio: bytes) -> tuple[float, bytes]:
    """The audio's length in seconds and its waveform: the loudest sample of each of up to
    WAVEFORM_POINTS equal stretches, scaled to 0-255 against the loudest of all."""
    import numpy as np

    with _opened(audio) as sound:
        frames, rate = sound.frames, sound.samplerate
        if frames <= 0 or rate <= 0:
            raise NotAudio("no samples")
        stretch = math.ceil(frames / WAVEFORM_POINTS)
        peaks = [float(np.abs(block).max()) if block.size else 0.0
                 for block in sound.blocks(blocksize=stretch, dtype="float32", always_2d=True)]
    loudest = max(peaks) or 1.0
    return frames / rate, bytes(min(255, round(peak / loudest * 255)) for peak in peaks)

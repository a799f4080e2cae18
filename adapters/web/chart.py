"""Tokens per day as an SVG bar chart, drawn on the server (no script, no third-party asset):
the owner's page (SPEC 21). Only numbers go into the drawing; the template escapes the labels."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 720, 240, 64, 28, 12


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    y_in: float  # tokens in, the lower part
    height_in: float
    y_out: float  # tokens out, on top
    height_out: float
    label: str  # the day, shown under every fifth bar counted back from today's (the last), and as its title
    title: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    top: int  # the largest day's tokens: the y axis' top
    baseline: float
    left: int


def tokens_chart(days: tuple[tuple[str, int, int], ...]) -> Chart:
    top = max([tokens_in + tokens_out for _, tokens_in, tokens_out in days] + [1])
    plot = HEIGHT - BOTTOM - TOP
    step = (WIDTH - LEFT) / max(len(days), 1)
    bars = []
    for n, (day, tokens_in, tokens_out) in enumerate(days):
        height_in, height_out = plot * tokens_in / top, plot * tokens_out / top
        base = HEIGHT - BOTTOM
        bars.append(Bar(round(LEFT + n * step + 1, 1), round(step - 2, 1), round(base - height_in, 1),
                        round(height_in, 1), round(base - height_in - height_out, 1), round(height_out, 1),
                        day[5:] if (len(days) - 1 - n) % 5 == 0 else "", f"{day}: {tokens_in:,} in, {tokens_out:,} out"))
    return Chart(WIDTH, HEIGHT, tuple(bars), top, HEIGHT - BOTTOM, LEFT)

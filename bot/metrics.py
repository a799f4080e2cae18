"""Prometheus metrics of this process, served at http://<listen>:<port>/metrics when `[metrics]
port` is set (SPEC section 12). Recording costs next to nothing, so it always happens; only the
server is optional. With several processes, scrape each one (Prometheus adds them up).

- `keepsake_turns_total{outcome}`: turns answered (`answered`) or failed (`failed`).
- `keepsake_turn_seconds`: a turn, from its start to its stored reply (model calls included).
- `keepsake_turn_wait_seconds`: how long a turn waited for its conversation's earlier turns, in
  any process sharing the database (the conversation's lock).
- `keepsake_model_seconds`: one call to the model server; `keepsake_model_errors_total`: calls
  that failed after their retries.
- `keepsake_summary_jobs_pending`: conversations this process is summarizing or about to.
"""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry()
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

TURNS = Counter("keepsake_turns", "Turns, by outcome (answered | failed).", ["outcome"], registry=REGISTRY)
TURN_SECONDS = Histogram("keepsake_turn_seconds", "A turn from its start to its stored reply.",
                         buckets=SECONDS, registry=REGISTRY)
TURN_WAIT_SECONDS = Histogram("keepsake_turn_wait_seconds",
                              "Time a turn waited for its conversation's earlier turns (any process).",
                              buckets=SECONDS, registry=REGISTRY)
MODEL_SECONDS = Histogram("keepsake_model_seconds", "One call to the model server.", buckets=SECONDS,
                          registry=REGISTRY)
MODEL_ERRORS = Counter("keepsake_model_errors", "Model calls that failed after their retries.", registry=REGISTRY)
SEMANTIC_PAUSES = Counter("keepsake_semantic_recall_pauses",
                          "Minutes recall by meaning stood aside: the embedding server was slow for a turn, or failed.",
                          ["reason"], registry=REGISTRY)
CHECKIN_SCANS = Counter("keepsake_checkin_scans", "Scans for due check-ins, by character.", ["character"],
                        registry=REGISTRY)
TOKENS = Counter("keepsake_tokens", "Tokens spent on people's behalf, by direction (in: prompt | out: reply).",
                 ["direction"], registry=REGISTRY)
CHECKINS_SENT = Counter("keepsake_checkins_sent", "Check-ins sent, by character.", ["character"], registry=REGISTRY)
SUMMARY_JOBS_PENDING = Gauge("keepsake_summary_jobs_pending",
                             "Conversations this process is summarizing or about to.", registry=REGISTRY)


def timed_turn(answer: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Times a turn and counts its outcome (a reply marked as an error counts as failed)."""
    @functools.wraps(answer)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        with TURN_SECONDS.time():
            reply = await answer(*args, **kwargs)
        TURNS.labels("failed" if reply.is_error else "answered").inc()
        return reply
    return timed


def count_pending_summaries(pending: Callable[[], int]) -> None:
    SUMMARY_JOBS_PENDING.set_function(pending)


def serve(port: int, listen: str) -> None:
    """The /metrics endpoint, on a thread of its own (prometheus_client's)."""
    start_http_server(port, addr=listen, registry=REGISTRY)

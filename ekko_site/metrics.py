"""Prometheus metrics: what the service measures, and `/metrics`, the scrape endpoint.

The metrics (prometheus-client) are defined here, once, and incremented where the work happens:
request latency per route (`RequestMetricsMiddleware`; ekko_site.asgi for `/mcp`), search latency per
arm (memory.search), extraction outcomes (memory.pipeline.runs) and webhook deliveries. Queue depths
are counted at scrape time from the database (memory.backlog). Labels carry only fixed vocabularies
(URL pattern names, arms, outcomes), never a tenant, an id or user data.

`/metrics` answers 404 unless `EKKO_METRICS_TOKEN` is set, and then only to `Authorization: Bearer
<token>`. With several worker processes, set `PROMETHEUS_MULTIPROC_DIR` to an empty directory shared by
them (gunicorn.conf.py empties it at start): each process writes its samples there and the scrape adds
them up (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Any process may count (a Celery worker too); a missing directory must not fail its first sample.
    Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

REQUEST_SECONDS = Histogram(
    "ekko_http_request_duration_seconds", "Time to answer an HTTP request, by URL pattern name.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
SEARCH_ARM_SECONDS = Histogram(
    "ekko_search_arm_duration_seconds",
    "Time of one arm of a card or message search: query_embedding, keyword, keyword_vector (the keyword "
    "and vector arms run as one statement), structured, rerank.",
    ["arm"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
EXTRACTIONS = Counter(
    "ekko_extractions_total", "Extraction runs that ended an attempt: done, retrying or failed.", ["outcome"])
EXTRACTION_OUTCOMES = ("done", "retrying", "failed")
for _outcome in EXTRACTION_OUTCOMES:
    EXTRACTIONS.labels(outcome=_outcome)  # present at 0 from the start, so rate() sees the first one
WEBHOOK_DELIVERIES = Counter(
    "ekko_webhook_deliveries_total", "Webhook delivery attempts, by outcome.", ["outcome"])

BACKLOG_CACHE_SECONDS = 15.0


class BacklogCollector(Collector):
    """Queue depths, counted from the database when scraped (at most every BACKLOG_CACHE_SECONDS)."""

    def __init__(self) -> None:
        self._last: tuple[float, dict[str, int]] | None = None

    def describe(self) -> list:
        return []  # registering must not query the database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from memory.backlog import background_backlog

        if self._last is None or time.monotonic() - self._last[0] > BACKLOG_CACHE_SECONDS:
            self._last = (time.monotonic(), background_backlog())
        depths = self._last[1]
        yield GaugeMetricFamily("ekko_embedding_queue_depth",
                                "Cards and evidence messages waiting for a vector (counted up to a cap).",
                                value=depths["embedding"])
        yield GaugeMetricFamily("ekko_extraction_queue_depth",
                                "Extraction runs queued, running or waiting to retry.",
                                value=depths["extraction"])


BACKLOG = BacklogCollector()
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    REGISTRY.register(BACKLOG)


def scrape_registry() -> CollectorRegistry:
    """Return the registry of a scrape: every process's samples (multiprocess mode) and the queue depths."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    registry.register(BACKLOG)
    return registry


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.EKKO_METRICS_TOKEN
    if not token:
        raise Http404("Metrics are off: set EKKO_METRICS_TOKEN.")
    keyword, _, given = request.headers.get("Authorization", "").partition(" ")
    if keyword != "Bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        return HttpResponse("Send Authorization: Bearer <EKKO_METRICS_TOKEN>.\n", status=401,
                            content_type="text/plain", headers={"WWW-Authenticate": "Bearer"})
    return HttpResponse(generate_latest(scrape_registry()), content_type=CONTENT_TYPE_LATEST)


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
    """Record one answered request (`route` is a URL pattern name, never a raw path)."""
    method = method if method in KNOWN_METHODS else "other"
    REQUEST_SECONDS.labels(route=route, method=method, status=str(status)).observe(seconds)


KNOWN_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


class RequestMetricsMiddleware:
    """Time every Django request under its URL pattern's name ("unmatched" when no pattern matched)."""

    def __init__(self, get_response) -> None:  # noqa: ANN001
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.view_name if match is not None and match.view_name else "unmatched"
        observe_request(route, request.method or "", response.status_code, time.perf_counter() - started)
        return response


def serve_worker_metrics(port: int) -> None:
    """Serve this Celery worker's metrics (all its pool processes, in multiprocess mode) on `port`.

    No token: the port is for the internal network only (docker-compose publishes no port for it).
    The worker's PROMETHEUS_MULTIPROC_DIR must be empty when it starts (docker-compose: a tmpfs).
    """
    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    start_http_server(port, registry=registry)

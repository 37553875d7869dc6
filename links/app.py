"""The HTTPS application: ``POST /mutate`` takes and returns an AdmissionReview (docs/reference.md section 8).

Every body gets an AdmissionReview, allowed and unchanged with a warning when
the body is not a review or the reviewer fails: the API server would otherwise
apply the webhook's ``failurePolicy`` and show the pod's creator an error for
the webhook's fault. Its status is 200 whenever there is a ``request.uid`` to
answer, else 400 (nothing the API server can take then: not JSON, JSON nested
too deeply, no uid, a body over :data:`MAX_BODY` bytes or cut short); never a
500. Bodies are limited to :data:`MAX_BODY` bytes (the API server's own
request limit is 3 MiB).
"""

import logging
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from links.review import Outcome, Received, Reviewer, receive, respond

log = logging.getLogger("links")

MAX_BODY = 6 * 1024 * 1024
"""Bytes of an AdmissionReview accepted (a pod of up to 3 MiB, with room for the review around it)."""
NAMESPACE = "feddns_links"
"""Prefix of the metric names; the listener's are ``feddns_links_connections`` and so on (feddns.https)."""


class LinksMetrics:
    """The webhook's Prometheus metrics (``--metrics``): reviews by result and their latency."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reviews = Counter("feddns_links_reviews_total", "AdmissionReviews answered, by result "
                               "(patched, unchanged, denied, conflict, reinvoked, not-a-pod, malformed, error)",
                               ["result"], registry=registry)
        self.seconds = Histogram("feddns_links_review_seconds",
                                 "Time to answer an AdmissionReview, DNS gating included",
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5),
                                 registry=registry)
        self.reloads = Counter("feddns_links_reloads_total", "Reloads of the policy file and the certificate, "
                               "by file and result (ok, failed)", ["file", "result"], registry=registry)
        self.shards = Gauge("feddns_links_local_shards", "Services carrying the federation label in this cluster",
                            registry=registry)


REVIEWER = web.AppKey("reviewer", Reviewer)
METRICS = web.AppKey("metrics", LinksMetrics)


def make_app(reviewer: Reviewer, metrics: LinksMetrics) -> web.Application:
    """The aiohttp application answering ``POST /mutate``."""
    app = web.Application(client_max_size=MAX_BODY)
    app[REVIEWER], app[METRICS] = reviewer, metrics
    app.router.add_post("/mutate", mutate)
    return app


async def mutate(request: web.Request) -> web.Response:
    """Answer one AdmissionReview: 200, or 400 when the body has no uid to answer (module doc)."""
    started = time.perf_counter()
    received = await _receive(request)
    try:
        review, outcome = await request.app[REVIEWER].review(received)
    except Exception:  # a bug here must not become an error for the pod's creator: allow unchanged
        log.exception("AdmissionReview failed; answering allowed, unchanged")
        outcome = Outcome("error", warnings=["feddns links: internal error (see its log); nothing was changed"])
        review = respond(received.uid, outcome)
    metrics = request.app[METRICS]
    metrics.reviews.labels(outcome.result).inc()
    metrics.seconds.observe(time.perf_counter() - started)
    _log(outcome)
    return web.json_response(review, status=200 if received.uid else 400)


async def _receive(request: web.Request) -> Received:
    """The body as an AdmissionReview; one that cannot be read whole has no uid to answer."""
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return Received(problem=f"the body is over {MAX_BODY} bytes")
    except (web.RequestPayloadError, ConnectionError) as exc:
        return Received(problem=f"the body did not arrive whole ({' '.join(str(exc).split()) or 'connection lost'})")
    return receive(body)


def _log(outcome: Outcome) -> None:
    if outcome.result == "denied":
        log.info("pod %s denied: %s", outcome.pod, outcome.message)
    elif outcome.warnings:
        log.info("pod %s %s, with warnings: %s", outcome.pod, outcome.result, " | ".join(outcome.warnings))
    else:
        log.debug("pod %s %s", outcome.pod, outcome.result)

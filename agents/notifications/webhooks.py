"""Webhooks (docs/api.md#webhooks): register an endpoint, fan a run event out to its owner's endpoints, sign, deliver.

A delivery is a row written after the commit that made the event happen, and POSTed by the task worker, never in a
request; an attempt that does not get a 2xx is retried with exponential backoff, and every attempt is recorded.
A destination must resolve to public addresses: checked when registering, before every attempt, and once more on
the socket actually connected (a name can resolve differently between the check and the connection).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import time
import uuid
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from agents import errors, periodic, tasks
from agents.models import DeliveryStatus, Run, Webhook, WebhookAttempt, WebhookDelivery, WebhookEvent
from agents.runs import leases, representation

log = logging.getLogger(__name__)

MAX_PER_USER = 10  # each one is a delivery row and a task per event: bounded, so a finished run stays cheap
SCHEMES = ("http", "https")
# Cloud instance metadata: refused even with AGENT_WEBHOOK_ALLOW_PRIVATE (never a receiver, always a credential store).
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")}
NAT64 = ipaddress.ip_network("64:ff9b::/96")
ERROR_CHARS = 500


class RefusedDestination(Exception):
    """The connection reached an address webhooks may not go to (not an OSError: urllib3 must not retry it)."""


# --- registering ---------------------------------------------------------------------------------------------------


def register(*, owner, url: str, events: list[str]) -> Webhook:
    """A new webhook of `owner` for `events`, with a fresh secret; a URL that resolves to a refused address is 400."""
    problem = destination_problem(url)
    if problem is not None:
        raise errors.InvalidRequest({"url": [problem]})
    if Webhook.objects.filter(owner=owner).count() >= MAX_PER_USER:
        raise errors.InvalidRequest({"detail": f"At most {MAX_PER_USER} webhooks per user: delete one first."})
    wanted = [name for name in WebhookEvent.values if name in events]  # canonical order, no repeats
    return Webhook.objects.create(owner=owner, url=url, events=wanted, secret=new_secret())


def unregister(*, webhook: Webhook) -> None:
    """Delete a webhook; its deliveries (and their attempts) go with it, so nothing pending is sent any more."""
    webhook.delete()


def new_secret() -> str:
    return "whsec_" + secrets.token_hex(32)


def destination_problem(url: str, *, what: str = "webhooks") -> str | None:
    """Why webhooks may not be sent to `url` now (its scheme, or an address its host resolves to), or None.

    The same guard checks the image URLs of a run's input (agents/api/inputs.py, `what="image URLs"`)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        return "Only http and https URLs can receive webhooks."
    host = parts.hostname
    if not host:
        return "The URL has no host."
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except ValueError:
        return "The URL's port is not valid."
    except (OSError, UnicodeError):  # gaierror is an OSError; an over-long label is a UnicodeError
        return f"The host {host} could not be resolved."
    for info in infos:
        problem = address_problem(str(info[4][0]))
        if problem is not None:
            return f"{host} resolves to {problem}: {what} may only go to public addresses."
    return None


def address_problem(address: str) -> str | None:
    """Why an IP address is refused as a webhook destination ("10.0.0.1, a private address"), or None."""
    ip = _unwrapped(ipaddress.ip_address(address.split("%", 1)[0]))
    if ip in METADATA:
        return f"{ip}, a cloud metadata address"
    if settings.AGENT_WEBHOOK_ALLOW_PRIVATE:
        return None
    kinds = (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("non-public", not ip.is_global),
    )
    kind = next((name for name, matches in kinds if matches), None)
    return None if kind is None else f"{ip}, a {kind} address"


def _unwrapped(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), which is where the packets end up."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


# --- fan-out (in the request, after the commit) --------------------------------------------------------------------


def announce(run: Run, event: str) -> int:
    """Queue a delivery of `event` to each of the run owner's webhooks that want it; how many were queued.

    One indexed read when none do; else the run is rendered once and each delivery is a row and a task.
    """
    hooks = [
        pk
        for pk, events in Webhook.objects.filter(owner_id=run.owner_id).values_list("pk", "events")
        if event in events
    ]
    if not hooks:
        return 0
    now = timezone.now()
    run_object = render_run(run)
    deliveries = [_delivery(webhook_id, run, event, run_object, now) for webhook_id in hooks]
    with transaction.atomic():  # a delivery is never left without its task
        WebhookDelivery.objects.bulk_create(deliveries)
        for delivery in deliveries:
            _enqueue(delivery.pk)
    return len(deliveries)


def _delivery(webhook_id, run: Run, event: str, run_object: dict, now: datetime) -> WebhookDelivery:
    """One webhook's delivery of `event` (not saved), its payload written out once."""
    delivery_id = uuid.uuid4()
    body = {"id": str(delivery_id), "event": event, "created_at": _iso(now), "run": run_object}
    return WebhookDelivery(
        id=delivery_id,
        webhook_id=webhook_id,
        event=event,
        run_id=run.pk,
        payload=json.dumps(body, separators=(",", ":")),
        next_attempt_at=now,
        created_at=now,
    )


def render_run(run: Run) -> dict:
    """The run object as the API shows it (without steps)."""
    return representation.run_json(run)


def _iso(moment: datetime) -> str:
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text  # as DRF writes times


def _enqueue(delivery_id, run_after: datetime | None = None) -> None:
    task = tasks.deliver_webhook if run_after is None else tasks.deliver_webhook.using(run_after=run_after)
    task.enqueue(delivery_id=str(delivery_id))  # by name: args[0] of a task is read as a run id (agents.runs.leases)


# --- signing and delivering (in the task worker) -------------------------------------------------------------------


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Reactsite-Signature value: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def retry_delay_s(attempts: int) -> float:
    """Seconds before the next attempt, after `attempts` failed ones: base, 2 x base, 4 x base, …"""
    return settings.AGENT_WEBHOOK_RETRY_BASE_S * 2 ** (attempts - 1)


STUCK_S = 300.0  # a pending delivery this far past its attempt time lost its task (a worker killed mid-attempt)


@periodic.every("webhooks", lambda: leases.lease_s() / 3)
def sweep_stuck(limit: int = 100) -> int:
    """A sweep (agents/periodic.py): queue again the pending deliveries whose task was lost. Delivery is at least
    once: a task that was only late may POST once more, with the same X-Reactsite-Delivery id for the receiver to drop
    it."""
    now = timezone.now()
    stale = WebhookDelivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lt=now - timedelta(seconds=STUCK_S)
    )
    requeued = 0
    for delivery_id in list(stale.values_list("pk", flat=True)[:limit]):
        with transaction.atomic():  # moved forward first: the next sweep leaves it alone while its task waits
            if stale.filter(pk=delivery_id).update(next_attempt_at=now):
                _enqueue(delivery_id)
                requeued += 1
    return requeued


def deliver(delivery_id) -> str:
    """One attempt of a pending delivery (a task's body): "delivered", "retrying", "failed", or "skipped"."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != DeliveryStatus.PENDING:
        return "skipped"  # deleted with its webhook, or already settled
    started, clock = timezone.now(), time.monotonic()
    status_code, error = _post(delivery)
    duration_ms = int((time.monotonic() - clock) * 1000)
    number = delivery.attempts + 1
    ok = status_code is not None and 200 <= status_code < 300
    outcome, fields = _outcome(ok, number)
    with transaction.atomic():
        pending = WebhookDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING, attempts=number - 1)
        if not pending.update(attempts=number, **fields):
            return "skipped"  # another worker recorded this attempt first
        WebhookAttempt.objects.create(
            delivery=delivery, number=number, at=started, status_code=status_code, error=error, duration_ms=duration_ms
        )
        if outcome == "retrying":
            _enqueue(delivery.pk, run_after=fields["next_attempt_at"])
    extra = {"delivery_id": str(delivery.pk), "event": delivery.event, "attempt": number, "status_code": status_code}
    log.log(logging.INFO if ok else logging.WARNING, "webhook %s", outcome, extra={**extra, "error": error})
    return outcome


def _outcome(ok: bool, number: int) -> tuple[str, dict]:
    now = timezone.now()
    if ok:
        return "delivered", {"status": DeliveryStatus.DELIVERED, "delivered_at": now, "next_attempt_at": None}
    if number >= settings.AGENT_WEBHOOK_MAX_ATTEMPTS:
        return "failed", {"status": DeliveryStatus.FAILED, "next_attempt_at": None}
    return "retrying", {"next_attempt_at": now + timedelta(seconds=retry_delay_s(number))}


def _post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    """POST the signed payload: the receiver's status code, or (None, why there was none)."""
    url = delivery.webhook.url
    problem = destination_problem(url)
    if problem is not None:
        return None, problem[:ERROR_CHARS]
    body = delivery.payload.encode()
    headers = _headers(delivery, body)
    try:
        with _session() as session:
            response = session.post(
                url,
                data=body,
                headers=headers,
                timeout=settings.AGENT_WEBHOOK_TIMEOUT_S,
                allow_redirects=False,  # a redirect is not a delivery, and could point anywhere
                stream=True,  # the answer's body is never read
            )
            response.close()
    except RefusedDestination as exc:
        return None, f"connected to {exc}: refused"[:ERROR_CHARS]
    except requests.Timeout:
        return None, f"no answer within {settings.AGENT_WEBHOOK_TIMEOUT_S:g} s"
    except requests.RequestException as exc:
        return None, _reason(exc)
    return response.status_code, ""


def _headers(delivery: WebhookDelivery, body: bytes) -> dict[str, str]:
    """The delivery's headers, its signature of `body` made now."""
    return {
        "Content-Type": "application/json",
        "User-Agent": f"reactsite-webhooks/{settings.VERSION}",
        "X-Reactsite-Event": delivery.event,
        "X-Reactsite-Delivery": str(delivery.pk),
        "X-Reactsite-Signature": sign(delivery.webhook.secret, int(time.time()), body),
    }


def _reason(exc: BaseException) -> str:
    """A short cause without the URL (which may carry a token): the innermost OS error's text, else the kind."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return f"{type(exc).__name__}: {cause.strerror}"[:ERROR_CHARS]
        cause = cause.__cause__ or cause.__context__
    return type(exc).__name__


# --- the connection guard ------------------------------------------------------------------------------------------


class _PeerCheck:
    """Refuses a connection whose peer address is not allowed, before a byte is sent (rebinding defeats a check of
    the name made earlier)."""

    def _new_conn(self):
        sock = super()._new_conn()  # type: ignore[misc]
        problem = address_problem(sock.getpeername()[0])
        if problem is not None:
            sock.close()
            raise RefusedDestination(problem)
        return sock


class _HTTPConnection(_PeerCheck, HTTPConnection):
    pass


class _HTTPSConnection(_PeerCheck, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class _GuardedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}


def _session() -> requests.Session:
    """A session that goes straight to the receiver (no proxy from the environment) through the guard."""
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", _GuardedAdapter(max_retries=0))
    session.mount("https://", _GuardedAdapter(max_retries=0))
    return session


# --- fetching through the guard (a run's document URLs) ------------------------------------------------------------


class FetchProblem(Exception):
    """Why a URL's content could not be fetched through the guard (its text names the cause, never the URL)."""


def fetch(url: str, *, what: str, max_bytes: int, timeout_s: float) -> tuple[bytes, str]:
    """GET `url` through the same guard as a delivery (agents/api/inputs.py: a run's document URLs): its host must
    resolve to allowed addresses, the socket connected is checked again, no redirect is followed, no proxy is used.
    At most `max_bytes` of body, all within `timeout_s` in all. Returns (body, Content-Type); FetchProblem else."""
    problem = destination_problem(url, what=what)
    if problem is not None:
        raise FetchProblem(problem)
    deadline = time.monotonic() + timeout_s
    headers = {"User-Agent": f"reactsite-documents/{settings.VERSION}", "Accept-Encoding": "identity"}
    try:
        with _session() as session:
            response = session.get(url, headers=headers, timeout=timeout_s, allow_redirects=False, stream=True)
            with response:
                if response.status_code != 200:
                    moved = " (redirects are not followed)" if 300 <= response.status_code < 400 else ""
                    raise FetchProblem(f"the URL answered {response.status_code}, not 200{moved}")
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise FetchProblem(f"the URL's content is {declared} bytes; at most {max_bytes}")
                body = bytearray()
                for chunk in response.iter_content(64 * 1024):
                    body += chunk
                    if len(body) > max_bytes:
                        raise FetchProblem(f"the URL's content is over {max_bytes} bytes")
                    if time.monotonic() > deadline:
                        raise FetchProblem(f"the URL's content did not arrive within {timeout_s:g} s")
                return bytes(body), response.headers.get("Content-Type", "")
    except RefusedDestination as exc:
        raise FetchProblem(f"connected to {exc}: {what} may only go to public addresses") from None
    except requests.Timeout:
        raise FetchProblem(f"the URL did not answer within {timeout_s:g} s") from None
    except requests.RequestException as exc:
        raise FetchProblem(f"the URL could not be fetched ({_reason(exc)})") from None

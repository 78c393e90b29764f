"""DRF permission classes over the rules in agents.permissions, and the scopes an API key needs on each route."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from agents.keys import services as keys
from agents.models import ApiKey, ApiKeyScope
from agents.permissions import can_review


class IsReviewer(BasePermission):
    message = "This needs the agents.review_run permission."

    def has_permission(self, request, view) -> bool:
        return can_review(request.user) or bool(request.user and request.user.has_perm("agents.review_run"))


READ = str(ApiKeyScope.RUNS_READ)
WRITE = str(ApiKeyScope.RUNS_WRITE)
APPROVALS = str(ApiKeyScope.APPROVALS)
MEMORY = str(ApiKeyScope.MEMORY)
AGENTS = str(ApiKeyScope.AGENTS)
NO_KEY = "no key"  # the route is managed with the user's token or a session, never with an API key
OPEN = "open"  # the route is open to anyone: a key there needs no scope
DECISION = "decision"  # runs:write, or approvals when the body carries a decision

# Every route of the API, by its URL name, to the scope an API key needs there: (to read: GET, HEAD, OPTIONS; to
# change: any other method). A route missing here takes no key at all (403): a new route is closed to keys until it
# is added, never open. docs/api-keys.md has this table in words; tests/api/test_api_keys.py walks every route.
ROUTE_SCOPES: dict[str, tuple[str, str]] = {
    "agent-list": (READ, AGENTS),  # a change: staff only (the view's own permission)
    "agent-detail": (READ, AGENTS),
    "agent-versions": (READ, READ),
    "agent-restore": (AGENTS, AGENTS),
    "run-list": (READ, WRITE),
    "run-detail": (READ, WRITE),
    "run-events": (READ, READ),
    "run-advance": (WRITE, DECISION),
    "run-cancel": (WRITE, WRITE),
    "run-fork": (WRITE, WRITE),
    "run-feedback": (WRITE, WRITE),
    "seed-run": (WRITE, WRITE),
    "thread-list": (READ, WRITE),
    "thread-detail": (READ, WRITE),
    "tool-list": (READ, READ),
    "tool-invoke": (WRITE, WRITE),
    "usage": (READ, READ),
    "webhook-list": (READ, WRITE),
    "webhook-detail": (READ, WRITE),
    "schedule-list": (READ, WRITE),
    "schedule-detail": (READ, WRITE),
    "evalrun-list": (READ, WRITE),
    "evalrun-detail": (READ, READ),
    "price-list": (READ, WRITE),  # a change: staff only (the view's own permission), like starting an eval
    "price-detail": (READ, WRITE),
    "fact-list": (MEMORY, MEMORY),
    "fact-detail": (MEMORY, MEMORY),
    "mcp": (WRITE, WRITE),
    "key-list": (NO_KEY, NO_KEY),
    "key-detail": (NO_KEY, NO_KEY),
    "health": (OPEN, OPEN),
    "schema": (OPEN, OPEN),
    "schema-json": (OPEN, OPEN),
    "docs": (OPEN, OPEN),
}
DECISION_FIELDS = ("approval", "decisions")  # an advance that sends either, not null, decides pending calls

NOT_WITH_A_KEY = "API keys cannot manage API keys: use your API token (Authorization: Token …) or a session."
NO_SUCH_ROUTE = "This route does not take API keys: use your API token or a session."


def route_scope(request) -> str:
    """The scope a key needs for this request (or NO_KEY, OPEN), from its route's name and method."""
    match = getattr(request, "resolver_match", None)
    scopes = ROUTE_SCOPES.get(match.url_name if match is not None else "")
    if scopes is None:
        return NO_KEY
    scope = scopes[0] if request.method in SAFE_METHODS else scopes[1]
    if scope == DECISION:
        data = request.data  # only this route's body is read here (the MCP view reads its own raw body)
        decides = isinstance(data, dict) and any(data.get(name) is not None for name in DECISION_FIELDS)
        return APPROVALS if decides else WRITE
    return scope


class ApiKeyScopes(BasePermission):
    """A request made with an API key passes only with the scope its route needs (ROUTE_SCOPES); tokens and sessions
    pass (they carry every scope). The key's authentication applies it to every request a key makes, whatever the
    view's own permission_classes (agents/api/authentication.py), so no view can take a key without it."""

    message = NO_SUCH_ROUTE

    def has_permission(self, request, view) -> bool:
        refused = self.refusal(request, request.auth) if isinstance(request.auth, ApiKey) else None
        if refused is not None:
            self.message = refused
        return refused is None

    @staticmethod
    def refusal(request, key: ApiKey) -> str | None:
        """Why `key` may not make this request (a 403's detail, naming the scope it needs), or None."""
        scope = route_scope(request)
        if scope == OPEN or (scope != NO_KEY and keys.allows(key, scope)):
            return None
        if scope == NO_KEY:
            match = getattr(request, "resolver_match", None)
            return NOT_WITH_A_KEY if match is not None and match.url_name in ROUTE_SCOPES else NO_SUCH_ROUTE
        return f'This API key lacks the scope "{scope}", which {request.method} {request.path} needs.'

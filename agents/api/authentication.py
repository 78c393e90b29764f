"""`Authorization: Token …` (or `Bearer …`), as DRF's TokenAuthentication, with its look-up as one prepared join.

DRF looks the token up with `Token.objects.select_related("user").get(key=…)`: building that query through the ORM
costs a visible share of a short run's CPU on every API request, for a statement that never changes. Here
the statement is built once per process and its row becomes the same `User` and `Token` objects through the ORM's
own `Model.from_db`. Same answers, same error messages, the same OpenAPI scheme `tokenAuth`. The same
statement brings the user's daily-quota facts (their override and today's usage), so the quota check of a create or
an advance costs no query, and whether they have webhooks, so a finished run of a user without any reads nothing to
learn it.

The key comes as `Authorization: Token <key>` or, as OAuth-style clients send it, `Authorization: Bearer <key>`
(docs/api.md#conventions): the same key, the same look-up.

The same class takes the API keys users make (`Authorization: Bearer rsk_…`, agents/keys/services.py; docs/api-keys.md):
a credential starting `rsk_` is looked up as a key (by its prefix, one indexed query), authenticates as the key's
owner with the key as `request.auth`, and is held to the scope its route needs (ApiKeyScopes, 403 naming it) right
here: every request made with a key passes through this class, whatever the view's permission_classes (/mcp and the
staff-only evals set their own), so no route can take a key without its scope being checked.
"""

from __future__ import annotations

from functools import cache

from django.db import connections, router
from django.utils.translation import gettext_lazy as _
from drf_spectacular.authentication import TokenScheme
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.authtoken.models import Token

from agents.api.permissions import ApiKeyScopes
from agents.keys import services as keys
from agents.models import ApiKey, DailyUsage, TokenQuota, Webhook
from agents.runs.persist import converted, db_converters
from agents.usage import quotas
from agents.usage.owners import OwnerFacts


@cache
def _lookup(db: str) -> tuple[str, list[str], list[str], list]:
    """The join; the token's and the user's field names in the order of its columns; each column's converters (as
    the ORM's compiler applies them: the backend's, then the field's)."""
    connection = connections[db]
    q = connection.ops.quote_name
    user_model = Token._meta.get_field("user").related_model
    token_fields = Token._meta.concrete_fields
    user_fields = user_model._meta.concrete_fields
    t, u = q(Token._meta.db_table), q(user_model._meta.db_table)
    columns = [f"{t}.{q(f.column)}" for f in token_fields] + [f"{u}.{q(f.column)}" for f in user_fields]
    user_fk = q(Token._meta.get_field("user").column)
    user_pk = f"{u}.{q(user_model._meta.pk.column)}"
    # The user's quota facts ride along (agents.usage.quotas): their override and today's usage, so a request that may
    # start a model call checks the daily quota without a query of its own.
    qt, dt = q(TokenQuota._meta.db_table), q(DailyUsage._meta.db_table)
    columns += [f"{qt}.{q('daily_tokens')}", f"{dt}.{q('prompt_tokens')}", f"{dt}.{q('completion_tokens')}"]
    columns += [f"{qt}.{q('daily_cost')}", f"{dt}.{q('cost_nanos')}"]  # and the spend quota's
    # And whether they have any webhook (agents.notifications.notify): a finished run of a user with none reads nothing
    # more.
    wt = q(Webhook._meta.db_table)
    columns += [f"EXISTS (SELECT 1 FROM {wt} WHERE {wt}.{q('owner_id')} = {user_pk})"]
    sql = (
        f"SELECT {', '.join(columns)} FROM {t} INNER JOIN {u} "  # noqa: S608 - model tables and columns only
        f"ON {t}.{user_fk} = {user_pk} "
        f"LEFT JOIN {qt} ON {qt}.{q('user_id')} = {user_pk} "
        f"LEFT JOIN {dt} ON {dt}.{q('owner_id')} = {user_pk} AND {dt}.{q('day')} = %s "
        f"WHERE {t}.{q('key')} = %s"
    )
    converters = db_converters(connection, Token, token_fields) + db_converters(connection, user_model, user_fields)
    return sql, [f.attname for f in token_fields], [f.attname for f in user_fields], converters


def _find(db: str, key: str) -> tuple | None:
    """The user and the token of `key` (None when there is none), from one run of the prepared join: the user
    carries the quota and webhook facts read with it (`owner_facts`)."""
    connection = connections[db]
    sql, token_names, user_names, converters = _lookup(db)
    day = quotas.today()
    with connection.cursor() as cursor:
        cursor.execute(sql, [connection.ops.adapt_datefield_value(day), key])
        row = cursor.fetchone()
    if row is None:
        return None
    override, prompt, completion, cost_override, cost, hooks = row[-6:]
    row = converted(list(row[:-6]), converters, connection)
    token = Token.from_db(db, token_names, row[: len(token_names)])
    user = Token._meta.get_field("user").related_model.from_db(db, user_names, row[len(token_names) :])
    token.user = user
    user.owner_facts = OwnerFacts(
        user.pk,
        override,
        bool(hooks),
        (day, (prompt or 0) + (completion or 0)),
        cost_read=True,
        cost_override=cost_override,
        spent_today=(day, cost or 0),
    )
    return user, token


def owner_facts(request) -> OwnerFacts | None:
    """What the token look-up read about the request's user with it (None for a session or any other way in): the
    views pass it to the services, which then check the quota and skip the webhook look-up without a query."""
    facts = getattr(request.user, "owner_facts", None)  # set below, on the user object this request authenticated
    return facts if isinstance(facts, OwnerFacts) else None


class FastTokenAuthentication(TokenAuthentication):
    keywords = ("Token", "Bearer")

    def authenticate(self, request):
        """DRF's, with either keyword (DRF makes an authenticator per request: the keyword it reads is this one's); an
        API key is then held to its route's scope (403 naming it)."""
        self.keyword = self._scheme(request)
        found = super().authenticate(request)
        if found is not None and isinstance(found[1], ApiKey):
            refused = ApiKeyScopes.refusal(request, found[1])
            if refused is not None:
                raise exceptions.PermissionDenied(refused)
        return found

    def authenticate_header(self, request) -> str:
        """A 401 asks for the scheme the request used (`WWW-Authenticate: Bearer` to a Bearer client)."""
        return self._scheme(request)

    def _scheme(self, request) -> str:
        parts = get_authorization_header(request).split()
        given = parts[0].lower() if parts else b""
        return next((k for k in self.keywords if given == k.lower().encode()), self.keywords[0])

    def authenticate_credentials(self, key):
        if keys.is_key(key):
            return self._api_key(key)
        found = _find(router.db_for_read(Token), key)
        if found is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user, token = found
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return user, token

    @staticmethod
    def _api_key(credential: str) -> tuple:
        """The key's owner and the key (its last use recorded, at most once a window), or a 401 saying why not."""
        try:
            key = keys.authenticate(credential)
        except keys.KeyRejected as exc:
            raise exceptions.AuthenticationFailed(exc.detail) from None
        keys.touch(key)
        return key.owner, key


SCHEME_DESCRIPTION = (
    "The user's API token, as `Authorization: Token <key>` or `Authorization: Bearer <key>`, or an API key they made "
    "(`rsk_…`, `POST /api/v1/keys`) as `Authorization: Bearer <key>`: a key is limited to its scopes (else 403)."
)


class FastTokenScheme(TokenScheme):
    """The served document's `tokenAuth`, naming both prefixes (drf-spectacular's names only the class's keyword)."""

    target_class = "agents.api.authentication.FastTokenAuthentication"
    priority = 1

    def get_security_definition(self, auto_schema):
        definition = super().get_security_definition(auto_schema)
        return definition | {"description": SCHEME_DESCRIPTION}

"""API keys over HTTP (docs/api-keys.md): validate → agents.keys.services → serialize. Per user; another user's key is
404; the secret is shown once, in the answer to the create. Managed with the user's token or a session only: a
request made with an API key is 403 here (agents/api/permissions.py, NO_KEY), so a key cannot mint keys."""

from __future__ import annotations

from datetime import UTC

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from agents.api.bodies import BodySerializer
from agents.api.fields import StrictCharField, StrictChoiceField
from agents.api.inputs import json_type
from agents.keys import services as keys
from agents.models import ApiKey, ApiKeyScope

NOT_WITH_A_KEY = OpenApiResponse(
    {"$ref": "#/components/schemas/Error"},  # the document's error shape (agents/api/schema.py)
    description="Made with an API key: keys are managed with the user's API token or a session, never with a key.",
)


class ApiKeySerializer(serializers.ModelSerializer):
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ApiKeyScope.choices), read_only=True)

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "scopes", "expires_at", "revoked_at", "last_used_at", "created_at"]
        read_only_fields = fields
        extra_kwargs = {
            "prefix": {"help_text": "The key's first characters after rsk_: they name it, and are no secret."},
            "expires_at": {"help_text": "After this the key is refused (401); null: it does not expire."},
            "revoked_at": {"help_text": "When the key was revoked (it is refused since, 401); null: it is not."},
            "last_used_at": {"help_text": "Its last use, to within API_KEY_LAST_USED_EVERY_S (60 s); null: never."},
        }


class ApiKeyCreatedSerializer(ApiKeySerializer):
    """The create's answer: the only time the secret is shown."""

    key = serializers.CharField(
        read_only=True,
        help_text="The key itself, `rsk_<prefix>_<secret>`, for `Authorization: Bearer <key>`. Shown only in this "
        "response: only its hash is stored.",
    )

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


@extend_schema_field({"type": "string", "format": "date-time"})
class FutureDateTimeField(serializers.Field):
    """An ISO 8601 time with a timezone, as a JSON string, later than now."""

    default_error_messages = {
        "invalid": "Expected an ISO 8601 date and time with a timezone (e.g. 2030-01-31T12:00:00Z).",
        "naive": "Give the time's timezone (e.g. 2030-01-31T12:00:00Z).",
        "past": "{when} has passed: give a time in the future.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise ValidationError(f"Expected a string, got {json_type(data)}.", code="invalid")
        try:
            moment = parse_datetime(data)
        except ValueError:  # the shape of one, out of range (a 31 February, an hour 25)
            moment = None
        if moment is None:
            self.fail("invalid")
        if moment.tzinfo is None:
            self.fail("naive")
        try:
            moment = moment.astimezone(UTC)
        except OverflowError:  # 9999-12-31T23:00:00-05:00 is past year 9999 in UTC
            self.fail("invalid")
        if moment <= timezone.now():
            self.fail("past", when=keys.when(moment))
        return moment

    def to_representation(self, value):
        return value


class ApiKeyCreateSerializer(BodySerializer):
    name = StrictCharField(max_length=keys.NAME_CHARS, help_text="What the key is for (a client, a machine).")
    scopes = serializers.ListField(
        child=StrictChoiceField(choices=ApiKeyScope.choices),
        min_length=1,
        max_length=len(keys.SCOPES),
        help_text="What the key may do: one or more of runs:read, runs:write, approvals, memory, agents "
        "(docs/api-keys.md).",
        error_messages={"min_length": "Give at least one scope.", "empty": "Give at least one scope."},
    )
    expires_at = FutureDateTimeField(
        required=False,
        allow_null=True,
        help_text="When the key stops working: a time in the future, with its timezone (a past one is 400; no schema "
        "can hold the clock); leave it out (or null) for never.",
    )


class ApiKeyViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The caller's own API keys: made, listed (never their secret or hash), revoked."""

    serializer_class = ApiKeySerializer
    lookup_value_converter = "anyuuid"  # any other id matches no route: the API's JSON 404

    def get_queryset(self):
        return ApiKey.objects.filter(owner_id=self.request.user.pk).order_by("-created_at", "-id")

    @extend_schema(
        description="The caller's API keys, newest first, revoked ones too (with `revoked_at`); never a secret.",
        responses={200: ApiKeySerializer(many=True), 403: NOT_WITH_A_KEY},
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(
        description="A new API key of the caller's, limited to `scopes`: its secret, `key`, is in this answer only.",
        request=ApiKeyCreateSerializer,
        responses={201: ApiKeyCreatedSerializer, 403: NOT_WITH_A_KEY},
    )
    def create(self, request):
        body = ApiKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, secret = keys.create_key(request.user, **body.validated_data)
        data = ApiKeyCreatedSerializer(key).data | {"key": secret}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(
        description="Revokes the key: from now on it is refused (401). It stays listed, with `revoked_at`.",
        request=None,
        responses={
            204: OpenApiResponse(description="Revoked: the key is refused from now on (revoking twice is the same)."),
            403: NOT_WITH_A_KEY,
        },
    )
    def destroy(self, request, pk=None):
        keys.revoke_key(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

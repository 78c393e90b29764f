"""Webhooks over HTTP (docs/api.md#webhooks): validate → agents.notifications.webhooks → serialize. Per user;
another user's webhook is 404; the secret is shown once, in the answer to the create."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from agents.api.bodies import BodySerializer
from agents.api.fields import StrictCharField, StrictChoiceField
from agents.models import Webhook, WebhookEvent
from agents.notifications import webhooks

URL_CHARS = 2000


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = Webhook
        fields = ["id", "url", "events", "created_at"]
        read_only_fields = fields

    events = serializers.ListField(child=serializers.ChoiceField(choices=WebhookEvent.choices), read_only=True)


class WebhookCreatedSerializer(WebhookSerializer):
    """The create's answer: the only time the secret is shown."""

    secret = serializers.CharField(read_only=True, help_text="Signs every delivery. Shown only in this response.")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


@extend_schema_field(
    {
        "type": "string",
        "format": "uri",
        "maxLength": URL_CHARS,
        "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^\\u0000]+$",
        "description": "http or https; its host must resolve to public addresses (else 400).",
    }
)
class WebhookURLField(StrictCharField):
    """A receiver's URL: http or https only (where it points is the service's check, after resolving it)."""


class WebhookCreateSerializer(BodySerializer):
    url = WebhookURLField(max_length=URL_CHARS)
    events = serializers.ListField(
        child=StrictChoiceField(choices=WebhookEvent.choices),
        min_length=1,
        max_length=10,
        help_text="At least one of the events; each delivery carries one.",
    )

    def validate_url(self, value: str) -> str:
        scheme = value.split("://", 1)[0].lower() if "://" in value else ""
        if scheme not in webhooks.SCHEMES:
            raise ValidationError("Only http and https URLs can receive webhooks.")
        try:
            URLValidator(schemes=list(webhooks.SCHEMES))(value)
        except DjangoValidationError:
            raise ValidationError("Enter a valid URL (e.g. https://example.com/hooks).") from None
        return value


class WebhookViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """The caller's own webhooks: `run.done` and `run.awaiting_approval` of their runs, POSTed and signed."""

    serializer_class = WebhookSerializer
    lookup_value_converter = "anyuuid"  # any other id matches no route: the API's JSON 404

    def get_queryset(self):
        return Webhook.objects.filter(owner_id=self.request.user.pk).order_by("-created_at")

    @extend_schema(request=WebhookCreateSerializer, responses={201: WebhookCreatedSerializer})
    def create(self, request):
        body = WebhookCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        webhook = webhooks.register(owner=request.user, **body.validated_data)
        return Response(WebhookCreatedSerializer(webhook).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Webhook) -> None:
        webhooks.unregister(webhook=instance)

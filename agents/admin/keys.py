"""The console's view of API keys (docs/api-keys.md): every user's keys, never a secret nor a hash; an action revokes.

Keys are made by their owners (`POST /api/v1/keys`): here nothing is added or edited. Staff see the page with the
model's permissions (agents.view_apikey, or agents.change_apikey which also revokes); superusers have them all.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from agents.keys import services as keys
from agents.models import ApiKey


class RevokedFilter(admin.SimpleListFilter):
    title = "revoked"
    parameter_name = "revoked"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(revoked_at__isnull=self.value() == "no")
        return queryset


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "name", "owner", "prefix", "scope_names", "created_at", "last_used_at", "expires_at", "revoked_at",
    ]  # fmt: skip
    list_select_related = ["owner"]
    list_filter = [("owner", admin.RelatedOnlyFieldListFilter), RevokedFilter]
    search_fields = ["name", "prefix", "owner__username"]
    # never hashed_key
    fields = [
        "id", "name", "owner", "prefix", "scope_names", "created_at", "last_used_at", "expires_at", "revoked_at",
    ]  # fmt: skip
    readonly_fields = fields
    actions = ["revoke_selected"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a key is made by its owner, who alone sees its secret, once

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # nothing of a key is edited: it is revoked (the action) or deleted

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("agents.change_apikey")

    @admin.display(description="scopes")
    def scope_names(self, key: ApiKey) -> str:
        return ", ".join(key.scopes)

    @admin.action(description="Revoke selected keys", permissions=["revoke"])
    def revoke_selected(self, request: HttpRequest, queryset) -> None:
        revoked = keys.revoke_keys(queryset)
        already = queryset.count() - revoked
        text = f"Revoked {revoked} key{'s' if revoked != 1 else ''}."
        if already:
            text += f" {already} {'was' if already == 1 else 'were'} revoked already."
        self.message_user(request, text, messages.SUCCESS)

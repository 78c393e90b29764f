from django.contrib import admin

from memory.models import Fact


@admin.register(Fact)
class FactAdmin(admin.ModelAdmin):
    """Facts by user: searchable, deletable by staff, never edited (they are the user's words)."""

    list_display = ["short_text", "owner", "created_at", "run"]
    list_filter = [("owner", admin.RelatedOnlyFieldListFilter), "created_at"]
    search_fields = ["text", "owner__username"]
    list_select_related = ["owner", "run"]
    readonly_fields = ["owner", "text", "digest", "run", "created_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="text")
    def short_text(self, fact: Fact) -> str:
        return fact.text[:80]

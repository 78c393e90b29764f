from django.contrib import admin
from django.utils.html import format_html_join

from memory import services
from memory.models import Fact


@admin.register(Fact)
class FactAdmin(admin.ModelAdmin):
    """Facts by user: searchable, deletable by staff, never edited (they are the user's words)."""

    list_display = ["short_text", "owner", "created_at", "run"]
    list_filter = [("owner", admin.RelatedOnlyFieldListFilter), "created_at"]
    search_fields = ["text", "owner__username"]
    list_select_related = ["owner", "run"]
    readonly_fields = ["owner", "text", "digest", "run", "created_at", "nearest_facts"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="text")
    def short_text(self, fact: Fact) -> str:
        return fact.text[:80]

    @admin.display(description="nearest facts of this user")
    def nearest_facts(self, fact: Fact) -> str:
        """The owner's facts closest in meaning to this one (the vector index), with their cosine similarity."""
        near = services.neighbours(fact, limit=5)
        if near is None:
            return "No vector index on this database (see `manage.py check --database default`)."
        if not near:
            return "None: this fact has no vector yet (`manage.py embed_facts`), or it is the user's only fact."
        return format_html_join(
            "", "<div>{} <span class='quiet'>({})</span></div>", ((f.text, f"{sim:.2f}") for f, sim in near)
        )

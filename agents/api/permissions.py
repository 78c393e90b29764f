"""DRF permission classes over the rules in agents.permissions."""

from rest_framework.permissions import BasePermission

from agents.permissions import can_review


class IsReviewer(BasePermission):
    message = "This needs the agents.review_run permission."

    def has_permission(self, request, view) -> bool:
        return can_review(request.user) or bool(request.user and request.user.has_perm("agents.review_run"))

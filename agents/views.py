"""The playground page at `/` (templates + plain JavaScript; the page talks to the REST API)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from agents.models import Agent
from agents.permissions import REVIEW_PERMISSION


@login_required
@ensure_csrf_cookie
def playground(request):
    user = request.user
    context = {
        "providers": list(settings.AGENT_ALLOWED_PROVIDERS),
        "agents": list(Agent.objects.order_by("name").values_list("name", flat=True)[:200]),
        "default_provider": settings.AGENT_DEFAULT_PROVIDER,
        "default_protocol": settings.AGENT_DEFAULT_PROTOCOL,
        "default_max_turns": settings.AGENT_DEFAULT_MAX_TURNS,
        "max_input_chars": settings.AGENT_MAX_INPUT_CHARS,
        "max_images": settings.AGENT_MAX_IMAGES,  # 0: no image picker (input is a string only)
        # Whether this user may decide approvals on their own runs (the server checks again on every decision).
        "may_decide": user.is_superuser or user.has_perm(REVIEW_PERMISSION) or settings.AGENT_SELF_APPROVAL,
    }
    return render(request, "agents/playground.html", context)

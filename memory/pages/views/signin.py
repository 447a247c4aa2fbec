"""Sign in and sign out (Django's session authentication; `next` only to this host)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth import logout as auth_logout
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from memory.pages.views.common import safe_next

# --------------------------------------------------------------------------- sign in / out


@require_http_methods(["GET", "POST"])
def login_view(request: HttpRequest) -> HttpResponse:
    target = safe_next(request, request.POST.get("next") or request.GET.get("next"), reverse("dashboard"))
    if request.user.is_authenticated and request.method == "GET":
        return redirect(target)
    form = AuthenticationForm(request, data=request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        auth_login(request, form.get_user())
        return redirect(target)
    return render(
        request, "pages/login.html", {"form": form, "next": target}, status=400 if form.errors else 200
    )


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    auth_logout(request)
    messages.info(request, _("You are signed out."))
    return redirect("login")

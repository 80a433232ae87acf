"""Console login: a live API key, checked as the API checks it, opens a cookie session.

The cookie holds a signed, expiring token (:mod:`.sessions`), is ``HttpOnly`` and
``SameSite=Strict`` and scoped to the console's path. Two kinds of session:

* an **admin** key reaches every page (dead letters, dashboard, task explorer, gallery of
  every tenant);
* a **tenant** key reaches only the tenant-facing pages (its own gallery) through
  :func:`viewer`; every admin page depends on :func:`operator`, which answers a tenant
  session with 403 (a page, or JSON for ``.json`` endpoints), never with the admin data.

Without a valid session an HTML page redirects to the login page and a JSON endpoint answers
401. State-changing forms depend on :func:`checked_form` (admin) or :func:`checked_viewer_form`
(log out), which also demand the session's CSRF token. The key behind a session is looked up
on every request, so revoking it ends the session.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Header, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute

from aigc_hub import tenancy
from aigc_hub.interfaces.console.rendering import PREFIX, page
from aigc_hub.interfaces.console.sessions import Sessions
from aigc_hub.interfaces.http.admin import actor_of
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.tenancy import Principal

COOKIE = "aigc_hub_console"


class LoginRequired(Exception):
    """No valid console session (missing, forged, expired, or its key was revoked)."""


class AdminRequired(Exception):
    """A tenant session asked for an admin page."""


class CsrfRefused(Exception):
    """A state-changing form came without the session's CSRF token."""


class ConsoleRoute(APIRoute):
    """A route whose auth failures answer for people: a redirect to login, or a 403 page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired:
                if request.url.path.endswith(".json"):
                    return JSONResponse({"detail": "log in to the console"}, status_code=401)
                return RedirectResponse(_login_url(request), status_code=303)
            except AdminRequired:
                if request.url.path.endswith(".json"):
                    return JSONResponse({"detail": "admin only"}, status_code=403)
                return page(
                    request,
                    "error.html",
                    status_code=403,
                    title="Admins only",
                    message="This page is for operators: it needs an admin key. "
                    "A tenant key opens the gallery of its own tasks.",
                )
            except CsrfRefused:
                return page(
                    request,
                    "error.html",
                    status_code=403,
                    title="Refused",
                    message="The form was not sent from this console session (CSRF token "
                    "missing or wrong). Reload the page and try again.",
                )

        return guarded


def _login_url(request: Request) -> str:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return f"{PREFIX}/login?next={quote(target, safe='')}"


def _safe_next(target: str | None) -> str:
    # Only paths inside the console: never an open redirect to another site.
    if target and target.startswith(PREFIX + "/") and not target.startswith("//"):
        return target
    return f"{PREFIX}/"


def sessions_of(request: Request) -> Sessions:
    """The app's session signer (created on first use with a random per-process secret;
    set ``app.state.console_sessions`` beforehand to share a secret between processes)."""
    sessions: Sessions | None = getattr(request.app.state, "console_sessions", None)
    if sessions is None:
        sessions = Sessions()
        request.app.state.console_sessions = sessions
    return sessions


@dataclass(frozen=True)
class Operator:
    """The key behind a console session (an admin's or a tenant's), and the CSRF token its
    forms carry."""

    principal: Principal
    token: str
    csrf: str

    @property
    def is_admin(self) -> bool:
        """True for an admin key's session."""
        return self.principal.role == "admin"

    @property
    def actor(self) -> str:
        """The audit actor: the same ``admin:<key id>`` the admin API records."""
        return actor_of(self.principal)


async def viewer(request: Request) -> Operator:
    """The logged-in key, admin or tenant; raises :class:`LoginRequired` otherwise."""
    sessions = sessions_of(request)
    token = request.cookies.get(COOKIE, "")
    session = sessions.verify(token)
    if session is None:
        raise LoginRequired
    who = await tenancy.live_principal(hub_of(request).engine, session.key_id)
    if who is None:
        raise LoginRequired
    return Operator(principal=who, token=token, csrf=sessions.csrf(token))


async def operator(who: Annotated[Operator, Depends(viewer)]) -> Operator:
    """The logged-in admin; :class:`AdminRequired` for a tenant's session."""
    if not who.is_admin:
        raise AdminRequired
    return who


def _check_csrf(request: Request, who: Operator, csrf: str | None) -> Operator:
    if not sessions_of(request).check_csrf(who.token, csrf):
        raise CsrfRefused
    return who


async def checked_form(
    request: Request,
    who: Annotated[Operator, Depends(operator)],
    csrf: Annotated[str | None, Form()] = None,
) -> Operator:
    """The admin of a state-changing form that carries the session's CSRF token."""
    return _check_csrf(request, who, csrf)


async def checked_viewer_form(
    request: Request,
    who: Annotated[Operator, Depends(viewer)],
    csrf: Annotated[str | None, Form()] = None,
) -> Operator:
    """Any session's form (log out) that carries the session's CSRF token."""
    return _check_csrf(request, who, csrf)


async def checked_viewer_call(
    request: Request,
    who: Annotated[Operator, Depends(viewer)],
    x_csrf_token: Annotated[str | None, Header()] = None,
) -> Operator:
    """Any session's script call (a JSON body, no form) carrying the session's CSRF token in
    ``X-CSRF-Token``."""
    return _check_csrf(request, who, x_csrf_token)


ViewerDep = Annotated[Operator, Depends(viewer)]
OperatorDep = Annotated[Operator, Depends(operator)]
CheckedDep = Annotated[Operator, Depends(checked_form)]
CheckedViewerDep = Annotated[Operator, Depends(checked_viewer_form)]
CheckedCallDep = Annotated[Operator, Depends(checked_viewer_call)]

router = APIRouter(route_class=ConsoleRoute)


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str | None = None) -> Response:
    return page(request, "login.html", next=_safe_next(next), error=None)


@router.post("/login", response_class=HTMLResponse)
async def login(
    request: Request,
    key: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str | None, Form(max_length=2000)] = None,
) -> Response:
    # The same check as the API's bearer auth: a live key. Its role decides the pages it
    # reaches (see the module's docstring), on every request, not here.
    who = await tenancy.authenticate(hub_of(request).engine, key.strip())
    if who is None:
        error = "This key is not a live API key."
        return page(request, "login.html", status_code=401, next=_safe_next(next), error=error)
    sessions = sessions_of(request)
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(
        COOKIE,
        sessions.issue(who.key_id),
        max_age=sessions.ttl_s,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(who: CheckedViewerDep) -> Response:
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response


@router.get("/")
async def home(who: ViewerDep) -> Response:
    # Operators start at the dead letters, tenants at their gallery.
    return RedirectResponse(f"{PREFIX}/dlq" if who.is_admin else f"{PREFIX}/gallery", 303)

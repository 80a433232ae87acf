"""Console login: an admin API key, checked as the admin API checks it, opens a cookie session.

The cookie holds a signed, expiring token (:mod:`.sessions`), is ``HttpOnly`` and
``SameSite=Strict`` and scoped to the console's path. Every console route depends on
:func:`operator`; without a valid session an HTML page redirects to the login page and a
JSON endpoint answers 401. State-changing forms depend on :func:`checked_form`, which also
demands the session's CSRF token. The key behind a session is looked up on every request,
so revoking it ends the session.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request, Response
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
    return f"{PREFIX}/dlq"


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
    """The admin behind a console session, and the CSRF token its forms carry."""

    principal: Principal
    token: str
    csrf: str

    @property
    def actor(self) -> str:
        """The audit actor: the same ``admin:<key id>`` the admin API records."""
        return actor_of(self.principal)


async def operator(request: Request) -> Operator:
    """The logged-in admin; raises :class:`LoginRequired` otherwise."""
    sessions = sessions_of(request)
    token = request.cookies.get(COOKIE, "")
    session = sessions.verify(token)
    if session is None:
        raise LoginRequired
    who = await tenancy.live_principal(hub_of(request).engine, session.key_id)
    if who is None or who.role != "admin":
        raise LoginRequired
    return Operator(principal=who, token=token, csrf=sessions.csrf(token))


async def checked_form(
    request: Request,
    who: Annotated[Operator, Depends(operator)],
    csrf: Annotated[str | None, Form()] = None,
) -> Operator:
    """The operator of a state-changing form that carries the session's CSRF token."""
    if not sessions_of(request).check_csrf(who.token, csrf):
        raise CsrfRefused
    return who


OperatorDep = Annotated[Operator, Depends(operator)]
CheckedDep = Annotated[Operator, Depends(checked_form)]

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
    # The same check as the admin API's bearer auth: a live key whose role is admin.
    who = await tenancy.authenticate(hub_of(request).engine, key.strip())
    if who is None or who.role != "admin":
        error = "This key is not a live admin key." if who is None else "This is not an admin key."
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
async def logout(who: CheckedDep) -> Response:
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response


@router.get("/")
async def home(who: OperatorDep) -> Response:
    return RedirectResponse(f"{PREFIX}/dlq", status_code=303)

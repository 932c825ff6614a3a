"""A person's preferences (language, time zone, keyboard shortcuts): services, middleware, views.

The language a page speaks is, in order: the person's choice, the browser's cookie or
Accept-Language (Django's LocaleMiddleware), English. The switch in the top bar works signed
in or not: it saves the choice for a signed-in person and sets the language cookie for both.
"""

import zoneinfo
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from guardian_core.models import PersonPreferences

# Where a signed-in person's preferences wait in their session: read at sign-in and on every
# save, so a page (and the queue's poll every few seconds) costs no query for them.
SESSION_KEY = "person_preferences"


@dataclass(frozen=True)
class Preferences:
    language: str = ""
    time_zone: str = ""
    keyboard_shortcuts: bool = True


def preferences_of(user) -> PersonPreferences:
    """The person's preferences; the defaults (unsaved) for a person who never set any."""
    found = PersonPreferences.objects.filter(user_id=user.pk).first()
    return found or PersonPreferences(user_id=user.pk)


def preferences_of_address(address: str) -> Preferences:
    """The preferences of the active person whose email is `address` (a notice's reader); the
    defaults, which mean the server's language and time zone, for an address no one has."""
    found = (
        PersonPreferences.objects.filter(user__email__iexact=address.strip(), user__is_active=True)
        .order_by("user_id")
        .first()
    )
    if found is None:
        return Preferences()
    return Preferences(found.language, found.time_zone, found.keyboard_shortcuts)


@contextmanager
def speaking_as(preferences: Preferences) -> Iterator[None]:
    """Words, dates and times in the person's language and time zone (the server's where they
    chose none), for what is made outside a request: a notice sent by a worker."""
    language = preferences.language or settings.LANGUAGE_CODE
    zone = (
        zoneinfo.ZoneInfo(preferences.time_zone)
        if preferences.time_zone in time_zone_names()
        else timezone.get_default_timezone()
    )
    with translation.override(language), timezone.override(zone):
        yield


def preferences_save(
    user, *, language: str, time_zone: str, keyboard_shortcuts: bool
) -> PersonPreferences:
    """Saves the person's preferences (blank language or time zone: the browser's, the server's)."""
    preferences, _created = PersonPreferences.objects.update_or_create(
        user_id=user.pk,
        defaults={
            "language": language,
            "time_zone": time_zone,
            "keyboard_shortcuts": keyboard_shortcuts,
        },
    )
    return preferences


def language_choose(user, language: str) -> PersonPreferences:
    """Records a signed-in person's choice of language from the switch; keeps the rest."""
    preferences, _created = PersonPreferences.objects.update_or_create(
        user_id=user.pk, defaults={"language": language}
    )
    return preferences


def remember_in_session(request: HttpRequest, preferences: PersonPreferences) -> Preferences:
    """Keeps the person's preferences in their session (what the middleware reads)."""
    kept = Preferences(
        language=preferences.language,
        time_zone=preferences.time_zone,
        keyboard_shortcuts=preferences.keyboard_shortcuts,
    )
    request.session[SESSION_KEY] = asdict(kept)
    return kept


@receiver(user_logged_in, dispatch_uid="guardian_person_preferences")
def _preferences_at_sign_in(sender, request: HttpRequest | None, user, **kwargs) -> None:
    if request is not None and hasattr(request, "session"):
        remember_in_session(request, preferences_of(user))


@cache
def time_zone_names() -> tuple[str, ...]:
    return tuple(sorted(zoneinfo.available_timezones()))


class PersonPreferencesMiddleware:
    """Activates a signed-in person's language and time zone for the request.

    After AuthenticationMiddleware (it needs the user) and LocaleMiddleware (whose browser
    language it overrides). `request.person_preferences` is what the top bar and the pages read.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        preferences = None
        if user is not None and user.is_authenticated:
            try:
                preferences = Preferences(**request.session[SESSION_KEY])
            except (KeyError, TypeError):  # a session from before they were kept in it
                preferences = remember_in_session(request, preferences_of(user))
            if preferences.language:
                translation.activate(preferences.language)
                request.LANGUAGE_CODE = translation.get_language()
            if preferences.time_zone in time_zone_names():
                timezone.activate(zoneinfo.ZoneInfo(preferences.time_zone))
        request.person_preferences = preferences
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


class PreferencesForm(forms.Form):
    language = forms.ChoiceField(
        label=gettext_lazy("Language"),
        required=False,
        choices=[("", gettext_lazy("Your browser's"))] + list(settings.LANGUAGES),
    )
    time_zone = forms.ChoiceField(
        label=gettext_lazy("Time zone"),
        required=False,
        help_text=gettext_lazy("Dates and times on every page are shown in it."),
    )
    keyboard_shortcuts = forms.BooleanField(
        label=gettext_lazy("Keyboard shortcuts in the decision pane"),
        required=False,
        help_text=gettext_lazy(
            "Turn them off if you use speech input or a screen reader's own keys: "
            "then no single key approves or rejects."
        ),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        server = settings.TIME_ZONE
        self.fields["time_zone"].choices = [
            ("", _("The server's (%(zone)s)") % {"zone": server})
        ] + [(name, name) for name in time_zone_names()]


def preferences_page(request: HttpRequest) -> HttpResponse:
    """Anyone signed in sets their own language, time zone and shortcuts."""
    current = preferences_of(request.user)
    if request.method == "POST":
        form = PreferencesForm(request.POST)
        if form.is_valid():
            saved = preferences_save(request.user, **form.cleaned_data)
            remember_in_session(request, saved)
            response = redirect("preferences")
            # The new language speaks from this answer's message on.
            with translation.override(saved.language or translation.get_language()):
                messages.success(request, _("Your preferences are saved."))
            _set_language_cookie(response, saved.language)
            return response
        status = 400
    else:
        form = PreferencesForm(
            initial={
                "language": current.language,
                "time_zone": current.time_zone,
                "keyboard_shortcuts": current.keyboard_shortcuts,
            }
        )
        status = 200
    return render(request, "guardian_core/preferences.html", {"form": form}, status=status)


@login_not_required
@require_POST
def language_switch_view(request: HttpRequest) -> HttpResponse:
    """The top bar's language switch: back to the page it was pressed on, in that language."""
    language = request.POST.get("language", "")
    if language not in dict(settings.LANGUAGES):
        return HttpResponseBadRequest(
            _("Unknown language %(language)r: choose one of %(choices)s.")
            % {"language": language, "choices": ", ".join(dict(settings.LANGUAGES))},
            content_type="text/plain; charset=utf-8",
        )
    if request.user.is_authenticated:
        remember_in_session(request, language_choose(request.user, language))
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("home")
    response = HttpResponseRedirect(back)
    _set_language_cookie(response, language)
    return response


def _set_language_cookie(response: HttpResponse, language: str) -> None:
    if language:
        response.set_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            language,
            max_age=365 * 24 * 3600,
            samesite="Lax",
            secure=settings.SESSION_COOKIE_SECURE,
            httponly=True,
        )
    else:
        response.delete_cookie(settings.LANGUAGE_COOKIE_NAME)

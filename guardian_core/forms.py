"""Forms of the sign-in side of the admin role's pages: a new API token and a person with their
roles. Both hand their content to the services, which hold the rules."""

from django import forms
from django.contrib.auth import get_user_model
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy


class ApiTokenForm(forms.Form):
    """A new API token: what uses it, and the account it acts as (its roles are the token's)."""

    name = forms.CharField(
        max_length=120,
        label=gettext_lazy("Name"),
        help_text=gettext_lazy("What uses it, e.g. “billing webhook”."),
    )
    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True).order_by("username"),
        label=gettext_lazy("Acts as"),
        help_text=gettext_lazy("The token can do exactly what this account's roles allow."),
    )


def role_choices() -> list[tuple[str, str]]:
    """(group name, label a person reads) of every role."""
    from guardian_core.roles import ROLES

    return [(role.name, role.label) for role in ROLES]


class PersonForm(forms.Form):
    """A new person: a sign-in name, an optional e-mail, and their roles."""

    username = forms.RegexField(
        regex=r"^[\w.@+-]+\Z",
        max_length=150,
        label=gettext_lazy("Sign-in name"),
        error_messages={"invalid": gettext_lazy("Use letters, digits and @ . + - _ only.")},
    )
    email = forms.EmailField(required=False, label=gettext_lazy("Email"))
    roles = forms.MultipleChoiceField(
        choices=role_choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        label=gettext_lazy("Roles"),
        help_text=gettext_lazy("Without a role a person can sign in but open nothing."),
    )

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError(_("Someone has this sign-in name already."))
        return username

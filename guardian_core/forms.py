"""Forms of the sign-in side of the admin role's pages: a new API token and a person with their
roles. Both hand their content to the services, which hold the rules."""

from django import forms
from django.contrib.auth import get_user_model


class ApiTokenForm(forms.Form):
    """A new API token: what uses it, and the account it acts as (its roles are the token's)."""

    name = forms.CharField(max_length=120, help_text="What uses it, e.g. “billing webhook”.")
    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True).order_by("username"),
        label="Acts as",
        help_text="The token can do exactly what this account's roles allow.",
    )


def role_choices() -> list[tuple[str, str]]:
    from guardian_core.roles import ROLES

    return [(role.name, role.name) for role in ROLES]


class PersonForm(forms.Form):
    """A new person: a sign-in name, an optional e-mail, and their roles."""

    username = forms.RegexField(
        regex=r"^[\w.@+-]+\Z",
        max_length=150,
        label="Sign-in name",
        error_messages={"invalid": "Use letters, digits and @ . + - _ only."},
    )
    email = forms.EmailField(required=False)
    roles = forms.MultipleChoiceField(
        choices=role_choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Without a role a person can sign in but open nothing.",
    )

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("Someone has this sign-in name already.")
        return username

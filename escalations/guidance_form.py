"""The form admins write the reviewers' guidance with (the guidance page and the Django admin)."""

from django import forms
from django.utils.translation import gettext_lazy as _

from escalations.models import ReviewGuidance
from runs.selectors import run_external_tool_names
from runs.tools import tool_registry


class ReviewGuidanceForm(forms.ModelForm):
    # A tool picked from the registry, not typed: a misspelt name would match no held call and
    # the guidance would silently never show.
    tool = forms.ChoiceField(
        required=False, label=_("Tool"), help_text=_("Shown on items that hold this tool.")
    )

    class Meta:
        model = ReviewGuidance
        fields = ["condition", "tool", "text"]
        labels = {"condition": _("Condition"), "text": _("Text")}
        help_texts = {
            "condition": _("Shown on items this condition escalated."),
            "text": _("What a reviewer should check or weigh; at most 2 000 characters."),
        }
        widgets = {"text": forms.Textarea(attrs={"rows": 4})}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The registered tools, and those external runs defined themselves: guidance for an
        # integrator's tool shows on its held calls as for any other.
        names = sorted(set(tool_registry()) | set(run_external_tool_names()))
        if self.instance.tool and self.instance.tool not in names:
            # A tool no longer registered: keep it selectable so the row still opens and saves.
            names.append(self.instance.tool)
        self.fields["tool"].choices = [("", _("— any tool —")), *((name, name) for name in names)]
        self.fields["condition"].choices = [
            ("", _("— any condition —")),
            *self.fields["condition"].choices[1:],
        ]

    # "Name a condition, a tool, or both" is the model's check constraint, whose message the
    # form shows once (a check here as well would say it twice).

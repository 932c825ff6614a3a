"""The admins' evaluation page: `manage.py evaluate`'s report of a trace file (an upload, or the
labelled examples: reviewers' verdicts and imported traces) with a reliability diagram per
condition."""

from django import forms
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods

from escalations.examples import ExampleFilters, labelled_examples_count, labelled_examples_jsonl
from guardian_core.engine.evaluation import DEFAULT_BINS
from guardian_core.models import GuardianModelVersion, PolicyVersion
from guardian_core.roles import manage_policy
from policies.guardian_model_views import kind_short
from policies.harness import EvaluationError, offered_models, traces_evaluate
from policies.reliability_chart import reliability_chart

# A page is not the place for a large trace set: the request holds a worker while it is read
# and scored. Larger files go through `manage.py evaluate`, which streams nothing either but
# holds no web worker.
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MAX_UPLOAD_TEXT = "20 MB"
MAX_BINS = 100
# Lines listed by number on the page; the rest are counted.
LISTED_PROBLEMS = 50
TRACES_FIELD = "traces"
FILE, EXAMPLES = "file", "examples"


class CappedTraceUpload(FileUploadHandler):
    """Stops reading the trace file once it passes MAX_UPLOAD_BYTES (the rest of the body is
    read and thrown away, so the other fields still arrive and the form comes back as sent),
    and refuses file fields other than the trace file."""

    def __init__(self, request: HttpRequest | None = None, limit: int = MAX_UPLOAD_BYTES):
        super().__init__(request)
        self.limit = limit
        self.refused: str | None = None  # the name of the file refused as too large

    def new_file(self, field_name, file_name, content_type, content_length, *args, **kwargs):
        super().new_file(field_name, file_name, content_type, content_length, *args, **kwargs)
        if field_name != TRACES_FIELD:
            raise SkipFile
        if content_length is not None and content_length > self.limit:
            self.refused = file_name
            raise SkipFile

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > self.limit:
            self.refused = self.file_name
            raise SkipFile
        return raw_data  # the next handler (memory or temporary file) keeps it

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler makes the file


def _policy_choices() -> list[tuple[int, str]]:
    return [
        (v.number, _("%(version)s (active)") % {"version": v} if v.is_active else str(v))
        for v in PolicyVersion.objects.order_by("-number")
    ]


VERSION_PREFIX = "version:"


def _model_choices() -> list[tuple[str, str]]:
    """Who scores rows without a probability: nobody, a guardian as it ships, or a learnt
    guardian model version of it (the active one is what runs use now)."""
    models = offered_models()
    versions = (
        GuardianModelVersion.objects.filter(adapter__in=models)
        .select_related("over")
        .order_by("-number")
    )
    return [
        ("", _("As logged: counted as unscored, not measured")),
        *(
            (name, _("Scored by the %(name)s guardian as it ships") % {"name": name})
            for name in models
        ),
        *(
            (
                f"{VERSION_PREFIX}{v.number}",
                (
                    _(
                        "Scored by guardian model version %(number)s (%(kind)s, %(model)s) — "
                        "active: what runs use now"
                    )
                    if v.is_active
                    else _("Scored by guardian model version %(number)s (%(kind)s, %(model)s)")
                )
                % {"number": v.number, "kind": kind_short(v), "model": v.model_version},
            )
            for v in versions
        ),
    ]


class EvaluateForm(forms.Form):
    """What `manage.py evaluate` takes: the traces, the policy version, the model and the bins."""

    source = forms.ChoiceField(
        label=gettext_lazy("Traces"),
        choices=[
            (FILE, gettext_lazy("A trace file (JSON Lines, the format of DESIGN.md)")),
            (
                EXAMPLES,
                gettext_lazy(
                    "The labelled examples: reviewers' verdicts and imported traces (this app's "
                    "own export)"
                ),
            ),
        ],
        initial=FILE,
        widget=forms.RadioSelect,
    )
    traces = forms.FileField(
        label=gettext_lazy("Trace file"),
        required=False,
        help_text=format_lazy(
            gettext_lazy("Up to {size}; for a larger one use manage.py evaluate."),
            size=MAX_UPLOAD_TEXT,
        ),
        widget=forms.FileInput(attrs={"accept": ".jsonl,.ndjson,.json,.txt"}),
    )
    policy = forms.TypedChoiceField(
        label=gettext_lazy("Policy version"),
        coerce=int,
        help_text=gettext_lazy(
            "Its t*, δ and costs give the fire and band rates and the expected cost."
        ),
    )
    model = forms.ChoiceField(
        label=gettext_lazy("Rows without a probability"),
        required=False,
        help_text=gettext_lazy(
            "A learnt version (manage.py recalibrate or train_local_guardian) is offered "
            "active or not: measure a candidate before activating it."
        ),
    )
    rescore = forms.BooleanField(
        label=gettext_lazy("Score every row with the model, even those that carry a probability"),
        required=False,
    )
    bins = forms.IntegerField(
        label=gettext_lazy("Bins"),
        min_value=1,
        max_value=MAX_BINS,
        initial=DEFAULT_BINS,
        help_text=gettext_lazy("Equal-width bins of the ECE and the reliability diagram."),
        widget=forms.NumberInput(attrs={"inputmode": "numeric"}),
    )

    def __init__(self, *args, refused_upload: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.refused_upload = refused_upload
        self.fields["policy"].choices = _policy_choices()
        self.fields["model"].choices = _model_choices()

    def clean_traces(self):
        upload = self.cleaned_data.get("traces")
        if upload is not None and upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(self._too_large(upload.name))
        return upload

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.refused_upload is not None:
            self.add_error(TRACES_FIELD, self._too_large(self.refused_upload))
        elif (
            cleaned.get("source") == FILE
            and not cleaned.get(TRACES_FIELD)
            and TRACES_FIELD not in self.errors
        ):
            self.add_error(
                TRACES_FIELD, _("Choose a trace file, or pick the labelled examples instead.")
            )
        if cleaned.get("source") == EXAMPLES and labelled_examples_count(ExampleFilters()) == 0:
            self.add_error(
                "source",
                _("No labelled example yet: reviewers' verdicts make them. Upload a file."),
            )
        if cleaned.get("rescore") and not cleaned.get("model"):
            self.add_error("rescore", _("Rescoring needs a model to score with: pick one above."))
        return cleaned

    @staticmethod
    def _too_large(name: str) -> str:
        return _(
            "%(name)s is larger than %(size)s, more than this page reads: split it, "
            "or run manage.py evaluate --traces on it."
        ) % {"name": name, "size": MAX_UPLOAD_TEXT}

    def trace_lines(self) -> tuple[list, str]:
        """The lines to evaluate and what they are, for the report's heading."""
        if self.cleaned_data["source"] == EXAMPLES:
            lines = list(labelled_examples_jsonl(ExampleFilters()))
            # Imported traces are among them (the demo's are made up): not "reviewers made".
            return lines, _("the labelled examples (%(count)s)") % {"count": len(lines)}
        upload = self.cleaned_data[TRACES_FIELD]
        # Bytes: the engine decodes each line, so a line that is not UTF-8 is one malformed
        # line, as in the command.
        return b"".join(upload.chunks()).splitlines(), upload.name


@csrf_exempt  # checked inside, once the capped upload handler is in place (Django's docs' way)
@manage_policy
@require_http_methods(["GET", "POST"])
def policy_evaluate_page(request: HttpRequest) -> HttpResponse:
    """The evaluation form, and on POST the harness's report of the traces chosen."""
    upload = CappedTraceUpload(request)
    if request.method == "POST":
        request.upload_handlers.insert(0, upload)
    return _policy_evaluate(request, upload)


@csrf_protect
def _policy_evaluate(request: HttpRequest, upload: CappedTraceUpload) -> HttpResponse:
    report, source_name, guardian_version = None, "", None
    if request.method == "POST":
        form = EvaluateForm(request.POST, request.FILES, refused_upload=upload.refused)
        if form.is_valid():
            lines, source_name = form.trace_lines()
            data = form.cleaned_data
            model, guardian_version = data["model"] or None, None
            if model and model.startswith(VERSION_PREFIX):
                model, guardian_version = None, int(model.removeprefix(VERSION_PREFIX))
            try:
                report = traces_evaluate(
                    lines=lines,
                    model=model,
                    policy_number=data["policy"],
                    bins=data["bins"],
                    rescore=data["rescore"],
                    guardian_version=guardian_version,
                    # The form's adapters are "as it ships"; a learnt version is its own choice.
                    base=model is not None,
                )
            except EvaluationError as error:
                # What the form cannot know ahead: the version is invalid.
                form.add_error("policy" if "policy version" in str(error) else None, str(error))
    else:
        form = EvaluateForm(
            initial=_initial(
                request.GET.get("policy", ""),
                request.GET.get("model", ""),
                rescore=request.GET.get("rescore") == "on",
                source=request.GET.get("source", ""),
            )
        )
    context = {
        "form": form,
        "report": report,
        "source_name": source_name,
        "max_upload": MAX_UPLOAD_TEXT,
        "chose_file": bool(request.FILES.get(TRACES_FIELD) or upload.refused),
    }
    if report is not None:
        context.update(_report_context(report))
        # A learnt version is named by its number: "local" would read as the shipped guardian.
        context["scored_by"] = (
            _("guardian model version %(number)s") % {"number": guardian_version}
            if guardian_version is not None
            else report["model"]
        )
    return render(
        request,
        "policies/policy_evaluate.html",
        context,
        status=400 if form.errors else 200,
    )


def _initial(raw_policy: str, raw_model: str = "", rescore: bool = False, source: str = "") -> dict:
    """The version named by ?policy=<number> (a version's page links here), else the active;
    the scorer named by ?model= (a guardian model version's page links here) when it is one of
    the choices; the traces named by ?source= (that page asks for the labelled examples, which
    need no file)."""
    numbers = {number for number, _ in _policy_choices()}
    if raw_policy.isdigit() and int(raw_policy) in numbers:
        policy = int(raw_policy)
    else:
        policy = (
            PolicyVersion.objects.filter(is_active=True).values_list("number", flat=True).first()
        )
    initial: dict = {"policy": policy}
    if source in (FILE, EXAMPLES):
        initial["source"] = source
    if raw_model and raw_model in {value for value, _ in _model_choices()}:
        initial["model"] = raw_model
        # A version's page asks for its figures: rows that carry a probability are scored
        # again by it, or the report would show the probabilities recorded under another.
        initial["rescore"] = rescore
    return initial


def _report_context(report: dict) -> dict:
    # Under a version with a judge, the band of the conditions it settles goes to the judge
    # first: the diagram says so rather than "to a person".
    number = report["policy_version"]
    judge = PolicyVersion.objects.filter(number=number).values_list("judge", flat=True)
    judge = judge.first() or {}
    judged = set(judge.get("conditions") or []) if isinstance(judge, dict) else set()
    conditions = [
        {
            "name": name,
            "figures": figures,
            "policy": figures["policy"],
            "chart": reliability_chart(
                name, figures["reliability"], figures["policy"], ece=figures["ece"]
            ),
            "per_class": sorted((figures.get("auroc_per_class") or {}).items()),
            "judge": judge.get("model") if name in judged else None,
        }
        for name, figures in report["conditions"].items()
    ]
    return {
        "conditions": conditions,
        "malformed_shown": report["malformed"][:LISTED_PROBLEMS],
        "malformed_more": max(len(report["malformed"]) - LISTED_PROBLEMS, 0),
        "unscored_shown": report["unscored"][:LISTED_PROBLEMS],
        "unscored_more": max(len(report["unscored"]) - LISTED_PROBLEMS, 0),
    }

"""The error that escalation writes (claims, verdicts) raise, naming every problem."""


class EscalationError(ValueError):
    """A claim or a verdict cannot be applied; `problems` names every one (str() joins them)."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))

"""A scripted chat agent for the coder/reviewer loop: its n-th reply is replies[n].

Stateless across calls and processes: n is the number of its own earlier replies in the
history it is given (the role's stored, append-only history), never an in-memory counter, so a
turn retried by another worker after a crash gets the same reply. Past the end of its script
it answers SCRIPT_ENDED (neither code nor a verdict).
"""

from guardian_core.engine.reviewer_loop import Message, ModelReply

SCRIPT_ENDED = "(script ended)"
MODEL_VERSION = "scripted"


class ScriptedChatAgent:
    model = MODEL_VERSION

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)

    def reply(self, history: tuple[Message, ...]) -> ModelReply:
        n = sum(1 for message in history if message.role == "assistant")
        text = self.replies[n] if n < len(self.replies) else SCRIPT_ENDED
        return ModelReply(text, model_version=MODEL_VERSION)

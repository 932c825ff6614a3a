"""A scripted chat agent for the coder/reviewer loop: its n-th reply is replies[n].

Stateless like the other scripted adapters: n is the number of its own earlier replies in the
history it is given, so a retried turn gets the same replies.
"""

from guardian_core.engine.reviewer_loop import Message, ModelReply

SCRIPT_ENDED = "(script ended)"


class ScriptedChatAgent:
    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)

    def reply(self, history: tuple[Message, ...]) -> ModelReply:
        n = sum(1 for message in history if message.role == "assistant")
        return ModelReply(self.replies[n] if n < len(self.replies) else SCRIPT_ENDED)

"""Guard an agent loop that runs elsewhere with Guardian: ask before each step, report after.

from guardian_client import Guardian, Call, Result

with Guardian("http://127.0.0.1:8000", token) as guardian:
    run = guardian.run(goal="Refund order ord_4472", tools=["read_order", "issue_refund"])
    gate = run.before(calls=[Call("read_order", {"order_id": "ord_4472"})])
    decision = run.after([Result(c.position, my_tools(c)) for c in gate.runnable])
"""

from guardian_client.client import AsyncGuardian, AsyncRun, Guardian, Run
from guardian_client.errors import (
    Conflict,
    GuardianError,
    InvalidRequest,
    NotAllowed,
    NotFound,
    Unavailable,
)
from guardian_client.types import (
    Call,
    Decision,
    Escalation,
    Feedback,
    Gate,
    GateCall,
    Reason,
    Result,
    Tool,
    UserMessage,
    Verdict,
)

__all__ = [
    "AsyncGuardian",
    "AsyncRun",
    "Call",
    "Conflict",
    "Decision",
    "Escalation",
    "Feedback",
    "Gate",
    "GateCall",
    "Guardian",
    "GuardianError",
    "InvalidRequest",
    "NotAllowed",
    "NotFound",
    "Reason",
    "Result",
    "Run",
    "Tool",
    "Unavailable",
    "UserMessage",
    "Verdict",
]

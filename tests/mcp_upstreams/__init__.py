"""Small real MCP servers (official SDK, no Django) that the MCP gateway's tests and bench start.

Run one: `python -m tests.mcp_upstreams.shop --transport stdio` (or `--transport http --port N`,
Streamable HTTP on http://127.0.0.1:N/mcp); the same for `tests.mcp_upstreams.crm`.
Every tool execution appends one JSON line to the file named by MCP_UPSTREAM_LEDGER (tool,
arguments, the request's `_meta` "guardian/idempotency-key", phase, time) before it returns, so a
test counts executions; `slow_refund` blocks until the file named by MCP_UPSTREAM_RELEASE exists
(or 60 s) and writes a "start" line and an "end" line.

- shop: lookup_order (read-only), refund (destructive), tag_order (not idempotent, open world),
  read_note (read-only; note "planted" carries a planted instruction, "plain" does not),
  slow_refund (destructive, blocks); resources note://plain and note://planted; prompt
  summarize_order.
- crm: lookup_order (clashes with shop's) and send_email (no annotations at all).
"""

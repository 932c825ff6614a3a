"""The `crm` test upstream: its own lookup_order (a name clash with shop's) and send_email."""

from mcp.server.mcpserver import Context, MCPServer

from tests.mcp_upstreams.common import main, record

NAME = "crm"

server = MCPServer(NAME, version="1.0", log_level="WARNING")


@server.tool()
def lookup_order(order_id: str, ctx: Context) -> str:
    """Read the customer record behind an order."""
    record(NAME, "lookup_order", {"order_id": order_id}, ctx)
    return f"Order {order_id} belongs to customer Ada Martin, ada@example.com, since 2021."


@server.tool()
def send_email(to: str, body: str, ctx: Context) -> str:
    """Send an email to a customer."""
    record(NAME, "send_email", {"to": to, "body": body}, ctx)
    return f"Delivered to {to}."


if __name__ == "__main__":
    main(server)

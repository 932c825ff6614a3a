"""The MCP gateway's Django app: its management command and its bridge to the runs."""

from django.apps import AppConfig


class McpGatewayConfig(AppConfig):
    name = "mcp_gateway"
    verbose_name = "MCP gateway"

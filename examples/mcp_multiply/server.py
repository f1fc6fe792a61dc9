"""An MCP server (stdio) with one tool, `multiply`, written with the `mcp` package's own server class: the tool the
model calls in configs/mcp_multiply.yaml, served the way any MCP server serves its tools.

Run by the training run itself (rollout.kwargs.mcp_servers starts it and stops it); by hand:
    python examples/mcp_multiply/server.py     # speaks MCP over stdin/stdout
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("multiply")


@server.tool()
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


if __name__ == "__main__":
    server.run("stdio")

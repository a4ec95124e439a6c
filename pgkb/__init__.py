"""pgkb's client API: what an application imports to use a pgkb database (the database itself is set up by
the `pgkb` command and the server install, docs/DEPLOYMENT.md).

    from pgkb.langchain import PgkbRetriever, PgkbVectorStore     # extra pgkb[langchain]
    from pgkb.llamaindex import PgkbRetriever                      # extra pgkb[llamaindex]
    pgkb mcp                                                       # the MCP server, stdio

The classes live in harness.frameworks; these modules are their public names.
"""

from harness import version

__version__ = version()
__all__ = ["__version__"]

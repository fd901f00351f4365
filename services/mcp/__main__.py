"""`python -m services.mcp [--transport stdio|streamable-http] [--host H] [--port P]`."""

import sys

from recon_sdk.mcp.__main__ import main

if __name__ == "__main__":
    sys.exit(main())

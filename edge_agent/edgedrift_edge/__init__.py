"""EdgeDrift edge agent.

httpx imports its command-line client's packages (click, rich, pygments: about 4 MB resident) whenever
they happen to be installed (a development environment, a host with other tools); the agent only uses
httpx's ``AsyncClient`` and never runs that command line, so its module is kept out. Every gateway
process of a host would hold those 4 MB otherwise (docs/benchmarks.md, section 6).
"""

import sys

sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "import httpx._main" fails

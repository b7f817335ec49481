"""``ballast extender`` with its watches followed in the reflectors' own threads instead of on the event
loop that serves the verbs: the cluster bench's server ``uvicorn-watch-threads`` (``--servers
uvicorn,uvicorn-watch-threads``) runs it beside the shipped extender to measure what reading the watches on
the loop changes.

    python -m bench.threaded_watches extender --policy ... [every flag of ballast extender]
"""

from __future__ import annotations

import sys

from ballast.cli import main
from ballast.extender.cache import ClusterCache

if __name__ == "__main__":
    start = ClusterCache.start
    ClusterCache.start = lambda self, loop=None: start(self)  # type: ignore[method-assign]
    sys.exit(main())

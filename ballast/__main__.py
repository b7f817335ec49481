"""``python -m ballast ...``: the same as the ``ballast`` command."""

import sys

from ballast.cli import main

sys.exit(main())

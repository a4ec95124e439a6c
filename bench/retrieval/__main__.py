"""``python -m bench.retrieval``: the benchmark's command line (see ``bench.retrieval.cli``)."""

import sys

from .cli import main

sys.exit(main())

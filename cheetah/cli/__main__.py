"""``python -m cheetah.cli``: the ``cheetah`` command (used to start child servers and jobs)."""

import sys

from cheetah.cli import main

sys.exit(main())

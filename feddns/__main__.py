"""``python -m feddns`` is the ``feddns`` console script."""

import sys

from feddns.cli import main

sys.exit(main())

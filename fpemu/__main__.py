"""``python -m fpemu``: the same as the ``fpemu`` command."""

import sys

from fpemu.cli import main

sys.exit(main())

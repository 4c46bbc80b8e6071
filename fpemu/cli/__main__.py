"""``python -m fpemu.cli``: the same as the ``fpemu`` command."""

import sys

from fpemu.cli import main

sys.exit(main())

"""`python -m launcher`: the same as the `astrai` command."""

import sys

from launcher.cli import main

sys.exit(main())

"""`python -m gateway`: the same as `astrai gateway`."""

import sys

from common.cli import main

sys.exit(main(["gateway", *sys.argv[1:]]))

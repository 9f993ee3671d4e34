"""`python -m worker`: the same as `astrai worker`."""

import sys

from common.cli import main

sys.exit(main(["worker", *sys.argv[1:]]))

"""`python -m gateway`: the HTTP gateway alone, the same as `astrai gateway`."""

import sys

from gateway.cli import main

sys.exit(main())

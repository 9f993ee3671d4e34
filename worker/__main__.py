"""`python -m worker`: one worker process alone, the same as `astrai worker`."""

import sys

from worker.cli import main

sys.exit(main())

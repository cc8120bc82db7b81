"""`python -m jdisc`: the jdisc command (jdisc/cli.py)."""

import sys

from jdisc.cli import main

sys.exit(main())

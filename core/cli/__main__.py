"""`python -m ember.cli ...` runs the `ember` command."""

import sys

from . import main

sys.exit(main())

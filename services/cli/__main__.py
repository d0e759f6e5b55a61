"""`python -m services.cli`: the `fabricplan` command."""
import sys

from . import main

sys.exit(main())

"""python -m cupy_csrattn.cli: the csrattn command."""

import sys

from cupy_csrattn.cli.command import main

sys.exit(main())

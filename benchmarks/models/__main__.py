"""``python -m benchmarks.models``: runs `benchmarks.models.run` (its docstring says what is
measured and how)."""

import sys

from benchmarks.models.run import main

sys.exit(main())

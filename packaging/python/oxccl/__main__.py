"""``python -m oxccl COMMAND...``: the same as the ``oxccl-run`` console script."""
import sys

from ._run import main

sys.exit(main())

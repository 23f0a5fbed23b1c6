"""``python -m rmsnorm_kernel.cli``: see :mod:`rmsnorm_kernel.cli.main`."""

import sys

from rmsnorm_kernel.cli.main import main

sys.exit(main())

"""Lets ``python -m spark_runtime run ...`` start the driver (see :mod:`spark_runtime.cli`)."""

import sys

from spark_runtime.cli import main

sys.exit(main())

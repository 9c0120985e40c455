"""Lets ``python -m spark_runtime run ...`` start the driver (see :mod:`spark_runtime.cli`).

The process ends with ``os._exit`` once its logs are flushed, skipping the interpreter's
finalization: by then the driver has stopped Spark, its store clients and its servers, and
what is left are daemon threads (client reactors, watchdogs) that finalization can catch
mid-write. Once in about 1500 tests a fenced driver logged its exit code 77 and the process
then died by SIGABRT, which the operator would read as a crash instead of as fenced.
``faulthandler`` prints every thread's stack should the process die by a fatal signal before.
"""

import faulthandler
import logging
import os
import sys

from spark_runtime.cli import main

faulthandler.enable()
code = main()
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)

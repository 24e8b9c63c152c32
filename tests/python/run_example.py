"""Runs an example script (argv[1], its arguments after it) as ctest's test of it; reports
skipped where torch or the built operator libraries are missing."""

import runpy
import sys

from common import require_torch

require_torch()
script = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as e:
    sys.exit(e.code)

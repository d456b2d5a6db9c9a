"""`python -m aksgpu.node.gpu_check`: see run.py."""

import sys

from aksgpu.node.gpu_check.run import main

sys.exit(main())

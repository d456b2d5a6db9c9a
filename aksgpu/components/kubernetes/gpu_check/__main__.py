"""`python -m aksgpu.components.kubernetes.gpu_check`: see run.py."""

import sys

from aksgpu.components.kubernetes.gpu_check.run import main

sys.exit(main())

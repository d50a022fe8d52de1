import sys

from tpu_kernels.cli import main

sys.exit(main())

import sys

from fault_imds.cli import main

sys.exit(main())

import sys

from fedsentry.cli import main

sys.exit(main())

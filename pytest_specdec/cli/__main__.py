"""``python -m pytest_specdec.cli``: the ``specdec`` command."""

import sys

from pytest_specdec.cli.main import main

sys.exit(main())

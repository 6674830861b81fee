"""``python -m odf_chain.cli``: the ``odf-chain`` command."""

import sys

from odf_chain.cli import main

sys.exit(main())

"""``python -m roce``: the ``roce`` command."""

from roce.cli import main

raise SystemExit(main())

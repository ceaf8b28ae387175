"""``python -m conveyor``: the command-line interface."""

from conveyor.cli import main

raise SystemExit(main())

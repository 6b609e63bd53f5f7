"""``python -m autopart.cli``: the same as the ``autopart`` command."""

from autopart.cli import main

main()

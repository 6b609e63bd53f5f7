"""``python -m autopart``: the same as the ``autopart`` command."""

from autopart.launcher import main

main()

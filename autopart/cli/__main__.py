"""``python -m autopart.cli``: the command line, in this process as it is."""

from autopart.cli import main

main()

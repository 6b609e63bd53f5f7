"""The ``autopart`` console script: prepares the process for measuring, then runs the CLI.

Importing :mod:`autopart` changes nothing in the process. The command line owns its
process, so before numpy is loaded it asks OpenBLAS's idle threads to stop spinning soon
(``OPENBLAS_THREAD_TIMEOUT``, unless the user set it: their spin slowed the next lane's run
by up to 1.7x on a machine whose cores onnxruntime and OpenCL also use) and keeps freed
host memory in the heap (:func:`autopart.host_memory.retain_freed_memory`); once the
command line is imported, its modules' objects are left out of the collector's passes
(:func:`autopart.host_memory.freeze_loaded_objects`). SIGINT and
SIGTERM are taken first of all (:func:`autopart.interrupts.run_interruptible`), so that
one line and exit status 130 or 143 end the process whenever they come. Memory is watched
(:func:`autopart.limits.memory_watch`): a command about to run the machine out of memory,
or past its ``--memory-limit``, stops with one ``error:`` line naming what it was doing,
before the kernel's OOM killer ends it with none.
"""

from __future__ import annotations

import os
import time

OPENBLAS_THREAD_TIMEOUT = "4"


def main() -> None:
    """Run the ``autopart`` command line in a process prepared for measuring.

    The commands see when it began (:func:`autopart.cli.common.command_started`): a tune's
    ``--budget`` counts the libraries' imports, about a second its user waits for too.
    """
    started = time.perf_counter()
    from autopart.interrupts import run_interruptible

    run_interruptible(lambda: _prepared_main(started))


def _prepared_main(started: float) -> None:
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT)
    from autopart.host_memory import freeze_loaded_objects, retain_freed_memory

    retain_freed_memory()
    from autopart.cli import main as cli_main
    from autopart.cli.common import COMMAND_STARTED, now_doing
    from autopart.limits import memory_watch

    freeze_loaded_objects()

    with memory_watch(now_doing):
        cli_main(obj={COMMAND_STARTED: started})


if __name__ == "__main__":
    main()

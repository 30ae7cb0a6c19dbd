"""The run dir's log file (Hydra's job logging `file` handler), opened on first use and quiet on storage faults.

Hydra configures job logging before the task runs, outside anything that can catch an error: a FileHandler on a
read-only or full run dir would raise there ("Unable to configure handler 'file'") and end the whole sweep.
This handler defers opening, and a write the storage refuses silences it for good; the run itself meets the
same fault on its own files and reports it as one line, as that run's failure.
"""

from __future__ import annotations

import logging
import sys


class RunLogHandler(logging.FileHandler):
    """A FileHandler with `delay=True` that drops records once its file cannot be opened or written."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None) -> None:
        super().__init__(filename, mode, encoding, delay=True)
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        try:
            super().emit(record)  # opens the file on the first record (outside StreamHandler's own try)
        except OSError:
            self.failed = True

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if isinstance(sys.exc_info()[1], OSError):
            self.failed = True  # the storage, not the record: stop trying, say nothing here
            return
        super().handleError(record)

"""The commands' progress line on a terminal: a spinner and the latest message on one line,
cut to the terminal's width, and cleared before anything else the command prints.

Whatever the command prints meanwhile (click.echo, print, a rich console on stderr) goes
through the line: it is erased, the output written, and the line drawn again below it.
"""

from __future__ import annotations

import os
import sys
import threading

from rich.cells import cell_len, set_cell_size

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
CLEAR = "\r\x1b[2K"
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


def fit(text: str, columns: int) -> str:
    """`text` on one line of a terminal `columns` wide, cut with an ellipsis if longer."""
    one = " ".join(text.split())
    # One column short: a line that fills the last column leaves the cursor pending a wrap,
    # and terminals (tmux, xterm) disagree on where the next output then lands.
    room = max(columns - 1, 2)
    if cell_len(one) <= room:
        return one
    return set_cell_size(one, room - 1) + "…"


class StatusLine:
    """A spinner line on `term` (a terminal) for the time of a `with` block."""

    def __init__(self, text: str, term=None, interval: float = 0.1):
        self.term = term if term is not None else sys.stderr
        self.text = text
        self.interval = interval
        self._lock = threading.RLock()
        self._frame = 0
        self._shown = False
        self._open_line = False  # a line printed without its end yet: no drawing until it ends
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="status-line", daemon=True)
        self._saved = None

    def update(self, text: str) -> None:
        with self._lock:
            self.text = text
            self._draw()

    def __enter__(self) -> StatusLine:
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Through(self, sys.stdout), _Through(self, sys.stderr)
        with self._lock:
            self.term.write(HIDE_CURSOR)
            self._draw()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        sys.stdout, sys.stderr = self._saved
        with self._lock:
            self._erase()
            self.term.write(SHOW_CURSOR)
            self.term.flush()

    def write_through(self, stream, s: str) -> None:
        if not s:  # click probes a stream with an empty write: let the stream answer
            stream.write(s)
            return
        with self._lock:
            self._erase()
            stream.write(s)
            stream.flush()
            self._open_line = not s.endswith("\n")
            self._draw()

    def _columns(self) -> int:
        try:
            return os.get_terminal_size(self.term.fileno()).columns
        except (OSError, ValueError):
            return 80

    def _draw(self) -> None:
        if self._open_line:
            return
        frame = FRAMES[self._frame % len(FRAMES)]
        self.term.write(CLEAR + fit(f"{frame} {self.text}", self._columns()))
        self.term.flush()
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            self.term.write(CLEAR)
            self.term.flush()
            self._shown = False

    def _spin(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                self._frame += 1
                self._draw()


class _Through:
    """A text stream that writes through a StatusLine (the rest is the stream's own)."""

    def __init__(self, line: StatusLine, stream):
        self._line, self._stream = line, stream

    def write(self, s: str) -> int:
        self._line.write_through(self._stream, s)
        return len(s)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name):
        # No binary buffer: click.echo writes to a stream's buffer when the stream's encoding
        # looks misconfigured, which would pass the line by and print onto the spinner.
        if name == "buffer":
            raise AttributeError(name)
        return getattr(self._stream, name)

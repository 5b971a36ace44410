"""Progress that suits where it goes: a tqdm bar on a terminal; in a log (stderr not a terminal:
nohup, a scheduler's job, CI) one plain line per round or stage, so a long run's log stays
readable line by line instead of one line of carriage-return updates."""

from __future__ import annotations

import os
import sys
import time

from tqdm.auto import tqdm


def interactive() -> bool:
    """Whether progress goes to a person at a terminal (stderr a TTY, CI not set)."""
    return sys.stderr.isatty() and not os.environ.get("CI")


def log_line(desc: str, **fields) -> None:
    """One plain progress line on stderr: ``desc key value key value ...``."""
    parts = [desc] + [f"{k} {_fmt(v)}" for k, v in fields.items() if v is not None]
    print(" ".join(parts), file=sys.stderr, flush=True)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def bar(iterable=None, **kwargs):
    """A tqdm bar over ``iterable`` on a terminal, the bare iterable (a silent bar when there is
    none) in a log: the caller's stage lines say where the work is."""
    if interactive():
        return tqdm(iterable, leave=False, **kwargs)
    return iterable if iterable is not None else tqdm(disable=True, **kwargs)


class Progress:
    """A counted task (training steps, models of a sweep): a bar on a terminal, with
    :meth:`note`'s figures as its postfix; in a log, :meth:`note` prints one line with the count,
    the figures and the elapsed time."""

    def __init__(self, total: int, desc: str, unit: str, initial: int = 0, enabled: bool = True):
        self.desc, self.total, self.count = desc, total, initial
        self.started = time.perf_counter()
        self.enabled = enabled
        self.tty = enabled and interactive()
        self.tqdm = tqdm(total=total, initial=initial, desc=desc, unit=unit,
                         dynamic_ncols=True, disable=not self.tty)

    def update(self, n: int = 1, **postfix) -> None:
        self.count += n
        self.tqdm.update(n)
        if postfix and self.tty:
            self.tqdm.set_postfix(postfix)

    def note(self, **figures) -> None:
        if self.tty:
            self.tqdm.set_postfix({k: _fmt(v) for k, v in figures.items()})
        elif self.enabled:
            elapsed = time.perf_counter() - self.started
            log_line(f"{self.desc} {self.count}/{self.total}", **figures,
                     elapsed=f"{elapsed:.0f}s")

    def write(self, text: str) -> None:
        if self.tty:
            self.tqdm.write(text, file=sys.stderr)
        elif self.enabled:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.tqdm.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

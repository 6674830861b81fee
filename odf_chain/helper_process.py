"""A second Python process for work that is independent per item (verify's one pass).

A helper is a script of this package that imports nothing from it (standard library, and
``blake3``), run by path with ``python -I``: it starts in tens of milliseconds, is never forked
(so no thread, lock or native runtime of the caller is copied into it), gets its input on
stdin and answers on stdout. Whatever goes wrong with it (it cannot start, exits non-zero, is
killed, answers too late or in a form the caller does not accept) makes :meth:`Helper.result`
None, and the caller does the work itself: a helper only ever saves time.

Only where it can pay: with a second core to run on, and with ``sys.executable`` a Python
interpreter (not a frozen application or an embedding host such as uWSGI, where it names
another program).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def available() -> bool:
    """Can a helper process run beside this one, and pay?"""
    executable = sys.executable or ""
    return (
        cores() > 1
        and not getattr(sys, "frozen", False)
        and Path(executable).name.startswith("python")
    )


class Helper:
    """``script`` run with ``arguments``, fed ``payload``; :meth:`result` waits for its answer
    (at most ``timeout`` seconds, then it is killed)."""

    def __init__(
        self,
        script: str,
        arguments: Sequence[str],
        payload: bytes,
        *,
        timeout: float,
        pass_fds: Sequence[int] = (),
        site: bool = True,
    ) -> None:
        self._out: bytes | None = None
        self._timeout = timeout
        flags = ["-I"] if site else ["-I", "-S"]
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, *flags, script, *arguments],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=tuple(pass_fds),
            )
        except (OSError, ValueError, TypeError):
            self._proc = None
            return
        self._thread = threading.Thread(target=self._talk, args=(payload,), daemon=True)
        self._thread.start()

    def _talk(self, payload: bytes) -> None:
        proc = self._proc
        assert proc is not None
        try:
            out, _ = proc.communicate(payload, timeout=self._timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return
        except (OSError, ValueError):
            proc.kill()
            proc.wait()
            return
        if proc.returncode == 0:
            self._out = out

    def result(self) -> bytes | None:
        """Its answer, or None when it failed in any way."""
        if self._proc is None:
            return None
        self._thread.join()
        return self._out


def seconds_for(items: int) -> float:
    """A time limit for a helper's ``items``: generous (a loaded machine is slow), and finite."""
    return 120.0 + items / 1000

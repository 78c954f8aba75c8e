"""Warnings that point at the user's line, not at bartz's."""

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised by the caller of this function
    that points at the first frame outside bartz (the user's call of `gbart`,
    ``fit.predict`` or an estimator's method)."""
    frame = sys._getframe(1)  # noqa: SLF001
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level

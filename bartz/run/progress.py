"""The one-line progress bar of `run_mcmc`."""

import math
import sys


class Progress:
    """A one-line progress bar (in place on terminals and in notebooks).

    Parameters
    ----------
    total
        The iterations of the run.
    printevery
        Print at most once per this many iterations (and at the end); None
        or 0 for silence.
    """

    def __init__(self, total: int, printevery: int | None):
        self.total = total
        self.printevery = printevery
        self.stream = sys.stdout
        self.inplace = _supports_carriage_return(self.stream)
        self.last_printed = 0
        self.open = False

    def update(self, f: dict):
        """Print the progress figures `f` (those of `run_mcmc`'s callback) if due."""
        if not self.printevery:
            return
        it = f['iteration']
        if it - self.last_printed < self.printevery and it < self.total:
            return
        self.last_printed = it
        frac = it / max(self.total, 1)
        width = 20
        bar = '#' * int(frac * width) + '-' * (width - int(frac * width))
        rate = f['elapsed'] / max(it, 1)
        remaining = rate * (self.total - it)
        sigma = '' if f['sigma'] is None else f' sigma {f["sigma"]:.3g}'
        line = (
            f'[{bar}] {it}/{self.total} it | acc grow {f["grow_acc"]:.0%} prune {f["prune_acc"]:.0%} '
            f'change {f["change_acc"]:.0%} swap {f["swap_acc"]:.0%} '
            f'| leaves/tree {f["mean_leaves"]:.2f}{sigma} | {_fmt_time(f["elapsed"])} elapsed, '
            f'{_fmt_time(remaining)} left'
        )
        if self.inplace:
            self.stream.write('\r' + line)
            self.open = True
        else:
            self.stream.write(line + '\n')
        self.stream.flush()

    def close(self):
        """End the line that the bar updates in place, if one is open."""
        if self.open:
            self.stream.write('\n')
            self.stream.flush()
            self.open = False


def _supports_carriage_return(stream) -> bool:
    if 'ipykernel' in sys.modules:
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fmt_time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return '?'
    if seconds < 60:
        return f'{seconds:.1f}s'
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f'{minutes}m{sec:02d}s'
    hours, minutes = divmod(minutes, 60)
    return f'{hours}h{minutes:02d}m'

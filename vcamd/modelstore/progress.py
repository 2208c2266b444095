"""The download's progress bar (rich, on stderr)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def progress_bar(name: str, total: int | None, done: int, enabled: bool) -> Iterator[Any]:
    """Yields `advance(n)`; a rich progress bar on stderr when enabled."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(name, total=total, completed=done)
        yield lambda n: bar.advance(task, n)

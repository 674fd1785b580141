"""Reading a magic's argument line: IPython's ``magic_arguments``, with one-sentence errors; its
decorators, typed (IPython's are unannotated)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from IPython.core import magic_arguments as ipython_arguments
from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

# returns Any, as IPython's decorators leave a magic: ``@line_magic`` types it as a union mypy cannot bind as a method
Decorator = Callable[[Callable[..., Any]], Any]


def magic_arguments(name: str | None = None) -> Decorator:
    """IPython's ``@magic_arguments()``: the decorated magic gets an argument parser."""
    decorator: Decorator = ipython_arguments.magic_arguments(name)
    return decorator


def argument(*args: Any, **kwargs: Any) -> Decorator:
    """IPython's ``@argument(...)``: one ``add_argument`` call on the magic's parser."""
    decorator: Decorator = ipython_arguments.argument(*args, **kwargs)
    return decorator


def parse_line(magic: Any, line: str) -> Any:
    """parse_argstring with a one-sentence UsageError for anything it cannot read."""
    try:
        shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot read the arguments {line!r}: {exc}") from None
    try:
        return parse_argstring(magic, line)
    except UsageError as exc:
        raise UsageError(str(exc).strip().splitlines()[-1]) from None
    except SystemExit:  # argparse exits on some malformed input
        raise UsageError(f"cannot read the arguments {line!r}; see %{magic.__name__}?") from None


def rank_number(value: str | None) -> int | None:
    """A ``--rank R`` option's rank (None when not given); a clear ``UsageError`` for anything else."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--rank takes a rank number, got {value!r}") from None

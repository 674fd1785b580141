"""Reading a magic's argument line: IPython's ``magic_arguments``, with one-sentence errors."""

from __future__ import annotations

import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring


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

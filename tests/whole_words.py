"""Whether a text names a secret (a pid, a user's name) as a whole word or number: what the tests of the GPU share
check each view for, without being fooled by the secret's digits inside a larger number."""

from __future__ import annotations

import re


def names(text: str, secret: object) -> bool:
    """Whether ``text`` holds ``secret`` as a whole word or number: a pid of 2147 is not named by 2147483648
    (2 GiB's bytes), nor a pid of 1796 by a timestamp of 1796066243.2 (a test failed so on the day the clock
    passed 1796000000)."""
    return re.search(rf"(?<![\w.]){re.escape(str(secret))}(?![\w.])", text) is not None

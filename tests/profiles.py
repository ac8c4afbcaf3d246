"""Example counts that follow the loaded hypothesis profile (see conftest.py)."""

from __future__ import annotations

import os

from hypothesis import settings

CI_EXAMPLES = 60  # the "ci" profile's max_examples


def examples(n: int) -> int:
    """``n`` in the derandomized "ci" profile; scaled up with the loaded profile's count in
    the others (HYPOTHESIS_PROFILE=deep), so a test that fixes its own count still digs
    deeper there."""
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        return n
    return max(n, n * settings.default.max_examples // CI_EXAMPLES)

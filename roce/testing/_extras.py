"""The optional extras the public testing API needs, and the error that names them.

``roce.testing.strategies`` (and the ``roce_strategies`` fixture) need hypothesis, which a
plain ``pip install roce`` does not bring: the ``fuzz`` extra does
(``pip install "roce[fuzz]"``; pyproject.toml lists it).  The fuzz harnesses, the mutator
and ``roce fuzz`` itself need nothing beyond roce's own dependencies.
"""

from __future__ import annotations

FUZZ_EXTRA_HINT = 'pip install "roce[fuzz]"'


def missing_extra(module: str, needed_by: str, cause: ImportError) -> ImportError:
    """The ImportError to raise when ``module`` of the fuzz extra cannot be imported by
    ``needed_by``; ``cause`` itself when something else failed to import."""
    if cause.name is not None and cause.name.split(".")[0] != module:
        return cause  # the module is there but broken inside: its own error says more
    return ImportError(f"{needed_by} needs {module}, which is not installed: "
                       f"{FUZZ_EXTRA_HINT}", name=module)

"""The compiled form of the flow engine: ``roce.analysis._flowengine``, which the build makes
from ``flowref.py`` (Cython, the C types in ``_flowengine.pxd``; docs/architecture.md,
"Compiled modules").

It is the same source as the reference, so there is nothing to configure: this module only
says whether the compiled form may run.  It may when it is built and was built from the
``flowref.py`` and ``_flowengine.pxd`` now beside it (``roce/_compiled.py`` records what
each build compiled); an edit since the build leaves it unused, with one ``RuntimeWarning``,
and the interpreted form runs instead, so an edited rule is never hidden by a stale build.

    from roce.analysis.cflows import CompiledAnalyzer
    a = CompiledAnalyzer()
    a.feed_capture(open_capture("f.pcap"))
    report = a.finish()
"""

from __future__ import annotations

import warnings
from typing import Any

from roce import _compiled, locate
from roce.analysis import flowrules as R
from roce.errors import UsageError

__all__ = ["AVAILABLE", "MODULE", "STALE", "CompiledAnalyzer"]

MODULE = "roce.analysis._flowengine"
_BUILT = _compiled.built_twin(MODULE)
# The sources edited since the build (all of them when there was none): then the compiled
# form stands aside.
STALE = _compiled.stale_twin(MODULE)
_ext: Any = None
if not STALE:
    try:
        from roce.analysis import _flowengine as _ext
    except ImportError:  # not built (or the fast path it cimports is not)
        _ext = None
elif _BUILT:
    warnings.warn(f"roce: {', '.join(STALE)} edited after the build; the flow analysis runs "
                  "its .py form (slower). Rebuild with: pip install -e .", RuntimeWarning,
                  stacklevel=2)
AVAILABLE = _ext is not None


def CompiledAnalyzer(udp_port: int = locate.ROCE_PORT, batch: int = R.BATCH,
                     max_events: int = R.MAX_EVENTS_PER_KIND) -> Any:
    """The compiled ``flowref.Analyzer``: ``feed``, ``feed_batch``, ``feed_capture``,
    ``finish``."""
    if _ext is None:
        why = "edited after the build" if STALE and _BUILT else "not built"
        raise UsageError(f"the compiled flow engine is not available ({why}): use the "
                         "reference engine")
    return _ext.Analyzer(udp_port, batch, max_events)

"""Hypothesis profiles: "ci" (default) is derandomized so CI runs are reproducible;
"deep" runs many more examples for local bug hunting: HYPOTHESIS_PROFILE=deep pytest."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow],
                          print_blob=True)
settings.register_profile("deep", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

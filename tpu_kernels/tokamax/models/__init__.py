"""Example models built on the Tokamax ops (used by the tests, docs and benchmarks; not a supported API)."""

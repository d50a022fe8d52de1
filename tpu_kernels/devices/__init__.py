"""Where a kernel runs: one small adapter per device type."""

"""Test helpers: the public ones in tpu_kernels.testing (generated kernel tests use them too)."""

from tpu_kernels.testing import FLOAT_DTYPES, TOL, Tol, assert_close, compile_counted, rand

__all__ = ["FLOAT_DTYPES", "TOL", "Tol", "assert_close", "compile_counted", "rand"]

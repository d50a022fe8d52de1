"""Checks every shipped kernel gets: opcheck and compile parity (tpu_kernels.testing's;
the TPU lowering check is `tpu_kernels.testing.assert_lowers_for_tpu`)."""

from tpu_kernels.testing import compile_matches_eager, opcheck

__all__ = ["compile_matches_eager", "opcheck"]

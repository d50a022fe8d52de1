"""Toolkit mutants of the TPU lowering check (tpu_kernels/lowering_check, tpu_kernels/lowering): the VMEM
buffers, limits and model."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import T_VMEM, T_VMEM_MODEL, Mutation, _toolkit

MUTANTS: tuple[Mutation, ...] = (
    # ---- issue 46: the tuner, its tables, the chip names and the VMEM limits ----
    _toolkit(
        "vmem-whole-array-double-buffered",
        "tpu_kernels/lowering_check/vmem.py",
        "            copies = 1 if one_step or bm.has_trivial_window() else 2",
        "            copies = 1 if one_step else 2",
        "a whole-array block at a constant index counted twice: kernels that fit are refused",
        T_VMEM,
    ),
    # ---- issue #45: the VMEM model calibrated against a v5e ----
    _toolkit(
        "vmem-one-step-double-buffered",
        "tpu_kernels/lowering_check/vmem.py",
        "            copies = 1 if one_step or bm.has_trivial_window() else 2",
        "            copies = 1 if bm.has_trivial_window() else 2",
        "a one-step grid's blocks counted twice: a one-step kernel the v5e compiles is refused",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-body-temporaries-not-counted",
        "tpu_kernels/lowering_check/temporaries.py",
        "    return held(body) + spill(body)",
        "    return 0",
        "the body's float32 values are left out: rmsnorm_backward at 256 rows passes, and the v5e refuses it",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-exactly-the-limit-refused",
        "tpu_kernels/lowering_check/vmem.py",
        "    return Verdict(k.estimate <= limit, k.estimate, limit, name)",
        "    return Verdict(k.estimate < limit, k.estimate, limit, name)",
        "buffers of exactly 16.0 MiB fail the check; the v5e compiles them",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-every-upcast-held-whole",
        "tpu_kernels/lowering_check/temporaries.py",
        "            total += upcasts[0].bytes + sum(v.upcast_of for v in upcasts[1:])",
        "            total += sum(v.bytes for v in upcasts)",
        "softmax_backward's two bf16 upcasts counted whole: blocks the v5e compiles fail the check",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-block-reads-held",
        "tpu_kernels/lowering_check/temporaries.py",
        '        across = [v for v in body.values if v.start < pos < v.end and v.primitive != "get"]',
        "        across = [v for v in body.values if v.start < pos < v.end]",
        "block reads that outlive a reduction counted: float32 kernels the v5e compiles fail the check",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-matmul-result-not-held",
        "tpu_kernels/lowering_check/temporaries.py",
        "            total += min(sum(v.bytes for v in body.values if v.start == pos), MATMUL_RESULT_HELD_MAX)",
        "            total += 0",
        "a matmul's float32 result left out: 16.0 MiB of matmul buffers pass, and the v5e refuses them",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-matmul-result-held-whole",
        "tpu_kernels/lowering_check/temporaries.py",
        "            total += min(sum(v.bytes for v in body.values if v.start == pos), MATMUL_RESULT_HELD_MAX)",
        "            total += sum(v.bytes for v in body.values if v.start == pos)",
        "a matmul's float32 result counted whole: 2048x2048x512 template calls the v5e compiles fail the check",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-forwarded-scratch-held",
        "tpu_kernels/lowering_check/vmem.py",
        "        if j in not_held:  # written before it is read at every step: stores forwarded to loads",
        "        if False:",
        "scratch written before it is read at every step counted: 24-96 MiB of it the v5e compiles fail",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-no-register-spill",
        "tpu_kernels/lowering_check/temporaries.py",
        "    return SPILL_BYTES if most_live(body) > SPILL_AFTER_VALUES else 0",
        "    return 0",
        "no register spill for 9 values live at once: 16.0 MiB of buffers pass, and the v5e refuses them",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "target-v5p-scoped-32-mib",
        "tpu_kernels/lowering/target.py",
        '    "v5p": 16 * _MIB,',
        '    "v5p": 32 * _MIB,',
        "v5p's default scoped VMEM limit taken as 32 MiB: kernels that fail to compile there pass the check",
        T_VMEM,
    ),
)

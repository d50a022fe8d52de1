"""Integrations with other libraries; each is imported on its own, never by `import tpu_kernels`.

    from tpu_kernels.integrations.transformers import apply_tpu_kernels
"""

"""Integrations with other libraries, each imported on its own (for example
`from tpu_kernels.integrations.transformers import apply_tpu_kernels`), never by `import tpu_kernels`."""

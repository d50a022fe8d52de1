"""The toolkit's version, in a leaf module: the compile cache's key and the tuning tables'
entries read it without importing the package's `__init__` (pyproject.toml's `version`)."""

__version__ = "0.1.0"

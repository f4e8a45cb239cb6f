"""cluster: boot one model across a small cluster of DGX Sparks."""

__version__ = "0.1.0"

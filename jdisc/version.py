"""jdisc's version; part of every cache key and generated-file header."""

__version__ = "0.1.0"

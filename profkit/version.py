"""profkit's version, in a module of its own so that any layer can read it (``profkit``'s
``__init__`` re-exports it as ``profkit.__version__``)."""

__version__ = "0.1.0"

"""``python -m profkit`` is the ``profkit`` command."""

from .cli import main

main()

"""The version of bartz (also in ``pyproject.toml``); in a module of its own
so that code that writes it (`bartz.io`) need not import the package."""

__version__ = '0.1.0'

"""Extensions to JAX used throughout bartz: generic utilities that know nothing about BART."""

from bartz.jaxext.autobatch import autobatch

__all__ = ['autobatch']

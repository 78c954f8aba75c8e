"""Compilation: the persistent compilation cache (`bartz.compile_cache`) and
the stored programs that a new process loads instead of tracing."""

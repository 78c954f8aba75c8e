"""Trees as fixed-size heap arrays: traversal and evaluation of a forest."""

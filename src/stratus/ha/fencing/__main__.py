"""``python -m stratus.ha.fencing``: print the docs' table of fencing methods (docs/zkfc.md)."""

from stratus.ha.fencing.registry import methods_table

print(methods_table())

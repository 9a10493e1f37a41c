"""``python -m stratus.ha.fencing [PAGE]``: print the docs' table of fencing methods, or
write it into PAGE (docs/zkfc.md, by ``make docs``) in place of the table there."""

import sys
from pathlib import Path

from stratus.ha.fencing.registry import methods_table, with_methods_table

if len(sys.argv) > 1:
    page = Path(sys.argv[1])
    page.write_text(with_methods_table(page.read_text()))
else:
    print(methods_table())

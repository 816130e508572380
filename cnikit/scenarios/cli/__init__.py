"""`cnikit demo`, `cnikit scenarios`, `cnikit run`, `cnikit matrix`, `cnikit up`: one module
each (listing, run, matrix, demo, up), their shared options and progress in common. The
matrix's running and matrix.json (cnikit.scenarios.matrix) are importable from here too.

Exit codes: 0 every invariant held (or, for demo/matrix, every verdict as expected),
1 a violation (evidence printed; a build that makes no progress is one too: liveness),
2 bad usage or an unusable environment (one line). `cnikit run` on a scenario that could
not be set up against this build (no free address in the subnet, a race a busy machine lost
every time) prints INCONCLUSIVE with the unmet precondition and exits 0: nothing was
violated, but nothing was exercised either. A design feature the build lacks is no such
precondition: the run goes on and prints the branch it took (`adapted:`).
Progress goes to stderr; results to stdout.
"""

from __future__ import annotations

from cnikit.errors import UsageError
from cnikit.scenarios.cli.common import _console, _progress, _quiet_logs
from cnikit.scenarios.cli.demo import DEMO_SCENARIO, DemoPrinter, demo_cmd
from cnikit.scenarios.cli.listing import scenarios_cmd
from cnikit.scenarios.cli.matrix import _table, matrix_cell, matrix_cmd
from cnikit.scenarios.cli.run import _print_result, default_report_dir, run_cmd
from cnikit.scenarios.cli.up import export_line, log_nemesis, up_cmd, up_urls
from cnikit.scenarios.matrix import MATRIX_SCHEMA, cell_of, matrix_ok, run_matrix, write_matrix

__all__ = ["demo_cmd", "matrix_cmd", "run_cmd", "scenarios_cmd", "up_cmd", "UsageError",
           "DEMO_SCENARIO", "DemoPrinter", "MATRIX_SCHEMA", "cell_of", "default_report_dir",
           "export_line", "log_nemesis", "matrix_cell", "matrix_ok", "run_matrix", "up_urls",
           "write_matrix", "_console", "_print_result", "_progress", "_quiet_logs", "_table"]

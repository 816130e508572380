"""Certify a CNI build: every scenario a correct build must hold, plus random-chaos for N
seeds, run against a target (the build under test), judged from outside only.

    from cnikit.certify import certify
    cert = certify("my-build.toml", seeds=3, report_dir="reports/certify")
    cert.exit_code      # 0 every run held, 1 a violation, 2 a run the kit could not complete
    cert.document       # what certificate.json holds

The runs are the run engine's (cnikit.scenarios); this package only chooses them, records
them, and writes the certificate, the index report and the JUnit file.
"""

from __future__ import annotations

from cnikit.certify.suite import Certification, certify, plan  # noqa: F401 - public API

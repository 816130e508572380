"""EC2 clients against the gate in its tests: a boto3 call EC2 refuses, and the AWS CLI
(PyPI `awscli`, in the dev extra) run with dummy credentials and no user configuration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

BIN = Path(sys.executable).parent


def refused(call: Callable[[], object], code: str, status: int = 400) -> str:
    """The message of EC2's refusal of `call`, asserted to carry `code` and `status`."""
    with pytest.raises(ClientError) as exc:
        call()
    err = exc.value.response
    assert err["Error"]["Code"] == code, err["Error"]
    assert err["ResponseMetadata"]["HTTPStatusCode"] == status
    return err["Error"]["Message"]


def aws_ec2(endpoint: str, region: str, home: Path) -> Callable[..., dict]:
    """`run(*args)`: `aws ec2 <args>` against `endpoint`, its JSON answer (asserted to exit
    0); skips the test where the CLI is not installed."""
    aws = shutil.which("aws", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if aws is None:
        pytest.skip("the AWS CLI is not installed (PyPI `awscli`, in the dev extra): "
                    "pip install awscli")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home),
           "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none")}

    def run(*args: str) -> dict:
        r = subprocess.run([aws, "ec2", *args, "--region", region, "--endpoint-url", endpoint,
                            "--output", "json"], capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout) if r.stdout.strip() else {}

    return run

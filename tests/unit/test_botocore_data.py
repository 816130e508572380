"""botocore's data files are parsed once per process and shared by every session (moto
makes a new one at every turn): the same document, and clients that still work."""

from __future__ import annotations

import subprocess
import sys

import botocore.session

import cnikit.cloud  # noqa: F401 - installs the sharing, as any use of the kit's EC2 does
from cnikit.cloud.botocore_data import share_parsed_data


def test_importing_the_kits_ec2_shares_the_parse():
    # A fresh process: this one may have shared already.
    code = ("import cnikit.cloud, botocore.session as s; "
            "print(s.Session().get_service_data('ec2') is s.Session().get_service_data('ec2'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "True", r.stderr


def test_two_sessions_get_one_parse_of_the_ec2_model():
    share_parsed_data()  # again: idempotent
    a, b = botocore.session.Session(), botocore.session.Session()
    assert a.get_service_data("ec2") is b.get_service_data("ec2")
    assert a.get_available_regions("ec2") == b.get_available_regions("ec2")
    assert "us-east-1" in a.get_available_regions("ec2")


def test_a_missing_file_is_still_missing_for_the_next_loader():
    from botocore.loaders import JSONFileLoader

    assert JSONFileLoader().load_file("/nonexistent/service-2") is None
    assert JSONFileLoader().load_file("/nonexistent/service-2") is None


def test_clients_of_two_sessions_call_ec2():
    from cnikit.cloud import Cloud

    cloud = Cloud.start()
    try:
        for session in (botocore.session.Session(), botocore.session.Session()):
            ec2 = session.create_client("ec2", endpoint_url=cloud.endpoint, region_name="us-east-1",
                                        aws_access_key_id="test", aws_secret_access_key="test")
            assert ec2.describe_vpcs()["Vpcs"] is not None
    finally:
        cloud.stop()

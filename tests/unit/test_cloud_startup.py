"""What the embedded EC2 costs to start and to reset: botocore's data files parsed once per
process and shared by every session (moto makes a new one at every turn); moto loads the
one AMI the kit's instances boot from, not 1,301."""

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


def test_moto_loads_the_kits_ami_and_instances_boot_from_it():
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    from cnikit.cloud import Cloud
    from cnikit.cloud.cloud import DEFAULT_AMI

    cloud = Cloud.start()
    try:
        topo = cloud.bootstrap(nodes=1)
        ec2 = cloud.client()
        (image,) = ec2.describe_images(ImageIds=[DEFAULT_AMI])["Images"]
        assert image["Platform"] == "windows"  # moto's own description of that AMI
        (res,) = ec2.describe_instances(InstanceIds=[topo.instances[0].instance_id])["Reservations"]
        assert res["Instances"][0]["ImageId"] == DEFAULT_AMI
        # 1 (44 where this process imported moto's EC2 before the kit set MOTO_AMIS_PATH)
        assert len(ec2_backends[DEFAULT_ACCOUNT_ID][cloud.region].amis) <= 44
    finally:
        cloud.stop()

"""Where the kit looks for LocalStack: localstack-client's conventions (AWS_ENDPOINT_URL,
else LOCALSTACK_HOST, default localhost:4566), checked against a real LocalStack."""

from __future__ import annotations

import socket

import pytest

from cnikit.cloud import Cloud, localstack

pytestmark = pytest.mark.localstack


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_endpoint_follows_localstack_clients_rules(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("LOCALSTACK_HOST", raising=False)
    monkeypatch.delenv("USE_SSL", raising=False)
    assert localstack.endpoint() == "http://localhost:4566"
    monkeypatch.setenv("LOCALSTACK_HOST", "10.1.2.3")
    assert localstack.endpoint() == "http://10.1.2.3:4566"
    monkeypatch.setenv("LOCALSTACK_HOST", "10.1.2.3:4600")
    assert localstack.endpoint() == "http://10.1.2.3:4600"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://ls.example:1234/")
    assert localstack.endpoint() == "http://ls.example:1234"


def test_cloud_uses_the_localstack_that_localstack_host_names(localstack_url, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("LOCALSTACK_HOST", localstack_url.removeprefix("http://"))
    with Cloud.start(ec2="localstack") as cloud:
        assert cloud.upstream_url == localstack_url and cloud._owned is None
        assert cloud.client().describe_availability_zones()["AvailabilityZones"]


def test_aws_endpoint_url_wins_over_localstack_host(localstack_url, monkeypatch):
    monkeypatch.setenv("LOCALSTACK_HOST", f"127.0.0.1:{dead_port()}")
    monkeypatch.setenv("AWS_ENDPOINT_URL", localstack_url)
    with Cloud.start(ec2="localstack") as cloud:
        assert cloud.upstream_url == localstack_url and cloud._owned is None

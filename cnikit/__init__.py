"""cnikit: a chaos and integration test kit for AWS-VPC-style CNI daemons."""

__version__ = "0.1.0"

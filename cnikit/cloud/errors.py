"""EC2 API errors as real EC2 answers them: a code, a message, an HTTP status.

The gate raises these from its rules; `responses.error_xml` renders them in EC2's XML error
format so botocore raises ClientError with the same code.
"""

from __future__ import annotations


class Ec2Error(Exception):
    # Set by the gate when a fault answered the call rather than EC2 (its audit says so).
    injected = False

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def invalid_value(message: str) -> Ec2Error:
    return Ec2Error("InvalidParameterValue", message)


def missing(param: str) -> Ec2Error:
    return Ec2Error("MissingParameter", f"The request must contain the parameter {param}")


def eni_not_found(eni_id: str) -> Ec2Error:
    return Ec2Error(
        "InvalidNetworkInterfaceID.NotFound",
        f"The networkInterface ID '{eni_id}' does not exist",
    )


def instance_not_found(instance_id: str) -> Ec2Error:
    return Ec2Error(
        "InvalidInstanceID.NotFound", f"The instance ID '{instance_id}' does not exist"
    )


def subnet_not_found(subnet_id: str) -> Ec2Error:
    return Ec2Error("InvalidSubnetID.NotFound", f"The subnet ID '{subnet_id}' does not exist")


def internal_error() -> Ec2Error:
    return Ec2Error(
        "InternalError", "An internal error has occurred. Retry your request.", status=500
    )


def insufficient_addresses() -> Ec2Error:
    return Ec2Error("InsufficientFreeAddressesInSubnet",
                    "The specified subnet does not have enough free addresses to satisfy the "
                    "request.")


def insufficient_cidr_blocks() -> Ec2Error:
    return Ec2Error("InsufficientCidrBlocks",
                    "The specified subnet does not have enough free cidr blocks to satisfy the "
                    "request.")


def dry_run_passed() -> Ec2Error:
    """EC2's answer to a DryRun call the caller may make (HTTP 412)."""
    return Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.",
                    status=412)

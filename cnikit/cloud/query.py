"""EC2 Query protocol requests: the parameters of a call, read and written.

Requests are form-encoded `Action=...&Version=...` with lists as `Name.N` and structures
as `Name.N.Member`; Describe calls narrow by `Filter.N.Name`/`Filter.N.Value.M` and page by
`MaxResults` and `NextToken`. The gate's action handlers read their parameters here and
build the ones they forward to the upstream.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from urllib.parse import parse_qsl

from cnikit.cloud.errors import Ec2Error, invalid_value


def parse_params(body: bytes, query: str = "") -> dict[str, str]:
    params = dict(parse_qsl(query, keep_blank_values=True))
    if body:
        try:
            params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise Ec2Error("MalformedQueryString", "The request body is not UTF-8") from None
    return params


# SigV4: "AWS4-HMAC-SHA256 Credential=AKID/20261130/us-west-2/ec2/aws4_request, ..."
_SCOPE = re.compile(r"Credential=[^/,\s]*/\d{8}/([^/,\s]+)/")


def signed_region(headers, params: dict[str, str]) -> str | None:
    """The region a request is signed for (its SigV4 credential scope, in the Authorization
    header or a presigned X-Amz-Credential), as EC2 and moto pick it; None when unsigned."""
    auth = headers.get("Authorization") if headers is not None else None
    if auth:
        m = _SCOPE.search(auth)
        if m:
            return m.group(1)
    cred = params.get("X-Amz-Credential", "").split("/")
    return cred[2] if len(cred) >= 5 else None


def signed_access_key(headers, params: dict[str, str]) -> str:
    """The access key id a request is signed with (the principal making it); "" unsigned."""
    auth = headers.get("Authorization") if headers is not None else None
    cred = ""
    if auth and "Credential=" in auth:
        cred = auth.split("Credential=", 1)[1]
    else:
        cred = params.get("X-Amz-Credential", "")
    return cred.split("/", 1)[0].strip() if "/" in cred else ""


def list_param(params: dict[str, str], name: str, member: str | None = None) -> list[str]:
    """Values of `name.N` (or `name.N.member`), ordered by N."""
    found: list[tuple[int, str]] = []
    prefix = name + "."
    for key, value in params.items():
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        n, _, tail = rest.partition(".")
        if not n.isdigit() or (tail or None) != member:
            continue
        found.append((int(n), value))
    return [v for _, v in sorted(found)]


def int_param(params: dict[str, str], name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise invalid_value(f"Invalid value '{raw}' for {name}") from None


def bool_param(params: dict[str, str], name: str) -> bool:
    return params.get(name, "").lower() == "true"


def filters(params: dict[str, str]) -> dict[str, list[str]]:
    """A Describe call's filters: name -> the patterns it matches."""
    out: dict[str, list[str]] = {}
    for key, value in params.items():
        m = re.fullmatch(r"Filter\.(\d+)\.Name", key)
        if m:
            out[value] = list_param(params, f"Filter.{m.group(1)}.Value")
    return out


def matches(values_of: Callable[[str], list[str] | None], wanted: dict[str, list[str]]) -> bool:
    """Whether a record passes a Describe call's filters: for every filter, one of the
    record's values for it (`values_of(name)`, None for a name EC2 does not know there)
    matches one of its patterns (EC2's * and ? wildcards)."""
    for name, patterns in wanted.items():
        values = values_of(name)
        if values is None:
            raise invalid_value(f"The filter '{name}' is invalid")
        if not any(fnmatch.fnmatchcase(v, p) for v in values for p in patterns):
            return False
    return True


def page(items: list, params: dict[str, str], most: int = 1000) -> tuple[list, str | None]:
    """One page of a Describe answer by MaxResults (5 to `most`, the action's bound) and
    NextToken (the next page's offset), with the next page's token (None on the last)."""
    max_results = int_param(params, "MaxResults")
    start = 0
    token = params.get("NextToken")
    if token:
        if not token.isdigit():
            raise invalid_value(f"Invalid value '{token}' for NextToken")
        start = int(token)
    if max_results is None:
        return items[start:], None
    if not 5 <= max_results <= most:
        raise invalid_value(f"Value ({max_results}) for parameter maxResults is invalid. "
                            f"Expecting a value between 5 and {most}.")
    next_token = str(start + max_results) if start + max_results < len(items) else None
    return items[start:start + max_results], next_token


def addresses_param(eni_id: str, ips: Iterable[str]) -> dict[str, str]:
    """The parameters that name an ENI and a list of addresses (Assign and Unassign)."""
    out = {"NetworkInterfaceId": eni_id}
    out.update({f"PrivateIpAddress.{n}": ip for n, ip in enumerate(ips, 1)})
    return out


def ipv6_addresses_param(eni_id: str, addresses: Iterable[str]) -> dict[str, str]:
    """The parameters of Assign/UnassignIpv6Addresses that name an ENI and addresses."""
    out = {"NetworkInterfaceId": eni_id}
    out.update({f"Ipv6Addresses.{n}": a for n, a in enumerate(addresses, 1)})
    return out

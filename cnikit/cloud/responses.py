"""EC2's XML envelope: an action's answer, an error, and an upstream answer read back.

Answers are XML in EC2's namespace, `<{Action}Response xmlns=...><requestId/>...`; errors
are `<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>`.
What goes inside an answer lives beside the action's handler (the gate's group modules,
cnikit/cloud/gate/); a request's parameters are read in cnikit/cloud/query.py and an
upstream's records in cnikit/cloud/upstream_xml.py.
"""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from xml.sax.saxutils import escape

from cnikit.cloud.errors import Ec2Error

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
XML_DECL = b'<?xml version="1.0" encoding="UTF-8"?>\n'


def request_id() -> str:
    return str(uuid.uuid4())


def error_xml(err: Ec2Error) -> bytes:
    return XML_DECL + (
        f"<Response><Errors><Error><Code>{escape(err.code)}</Code>"
        f"<Message>{escape(err.message)}</Message></Error></Errors>"
        f"<RequestID>{request_id()}</RequestID></Response>"
    ).encode()


def action_xml(action: str, inner: str) -> bytes:
    return XML_DECL + (
        f'<{action}Response xmlns="{NS}"><requestId>{request_id()}</requestId>'
        f"{inner}</{action}Response>"
    ).encode()


def return_true_xml(action: str) -> bytes:
    return action_xml(action, "<return>true</return>")


def items(tag: str, member: str, values: Iterable[str]) -> str:
    body = "".join(f"<item><{member}>{escape(v)}</{member}></item>" for v in values)
    return f"<{tag}>{body}</{tag}>"


def plain_items(tag: str, values: Iterable[str]) -> str:
    """A list of strings as EC2 renders one: each value an <item> of its own."""
    body = "".join(f"<item>{escape(v)}</item>" for v in values)
    return f"<{tag}>{body}</{tag}>"


def parse_xml(body: bytes) -> ET.Element:
    """An answer's document with the namespace taken off every tag."""
    root = ET.fromstring(body)
    for el in root.iter():
        if isinstance(el.tag, str) and "}" in el.tag:
            el.tag = el.tag.split("}", 1)[1]
    return root


def document(root: ET.Element) -> bytes:
    """A document read by `parse_xml` (and changed) as an answer again, in EC2's namespace."""
    root.set("xmlns", NS)
    return XML_DECL + ET.tostring(root)


def text(el: ET.Element, path: str, default: str = "") -> str:
    value = el.findtext(path)
    return default if value is None else value


def upstream_error(body: bytes) -> tuple[str, str] | None:
    """(code, message) when body is an EC2 error document."""
    try:
        root = parse_xml(body)
    except ET.ParseError:
        return None
    err = root.find(".//Errors/Error")
    if err is None:
        return None
    return err.findtext("Code") or "", err.findtext("Message") or ""

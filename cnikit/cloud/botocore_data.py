"""One parse per process of each of botocore's JSON data files.

botocore parses a data file again for every Session, and moto makes a new Session at
every turn: for EC2's regions when `moto.ec2` is imported (three times), for every backend
it creates, and the kit's and the fault IMDS's clients have theirs. In one `cnikit run`
that was EC2's service model 9 times and endpoints.json 7 times: 1.3 s of a 5.6 s process
(measured on this machine's 2 cores).

So the parsed documents are kept by path and shared. botocore only reads them; the one
change it makes is merging a model's `*-extras` files into it (moto's add two error
shapes), and a merge of the same extras again changes nothing.
"""

from __future__ import annotations

import threading

_parsed: dict[str, object] = {}
_lock = threading.Lock()


def share_parsed_data() -> None:
    """Make every botocore loader of this process share each file's parse (idempotent)."""
    try:
        from botocore import loaders
    except ModuleNotFoundError:  # the daemon's image reads the limits table, has no botocore
        return
    parse = loaders.JSONFileLoader.load_file
    if getattr(parse, "shared", False):
        return

    def load_file(self, file_path):
        try:
            return _parsed[file_path]
        except KeyError:
            pass
        data = parse(self, file_path)
        if data is None:  # no such file: botocore tries the next path and extension
            return None
        with _lock:
            return _parsed.setdefault(file_path, data)

    load_file.shared = True
    loaders.JSONFileLoader.load_file = load_file

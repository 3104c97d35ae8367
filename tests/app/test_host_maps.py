"""Host mappings (the Pod Viewer's "group by file"): parsed within bounds, kept within bounds."""

from __future__ import annotations

import base64
import sys

import dash
import pytest

from podscope.analyzers.hosts import MAX_MAPPED_HOSTS, MAX_NAME_CHARS, parse_mapping
from podscope.app.context import HostMaps


def test_a_mapping_is_parsed_and_its_bounds_are_said() -> None:
    assert parse_mapping("host,group\n# racks\nh0,r0\nh1 r1\n") == {"h0": "r0", "h1": "r1"}
    with pytest.raises(ValueError, match="line 2"):
        parse_mapping("h0,r0\nh1\n")
    with pytest.raises(ValueError, match=f"over {MAX_NAME_CHARS} characters"):
        parse_mapping(f"h0,{'r' * 1000}\n")
    many = "".join(f"h{i},g\n" for i in range(MAX_MAPPED_HOSTS + 1))
    with pytest.raises(ValueError, match="more than 100,000 hosts"):
        parse_mapping(many)


def test_kept_mappings_are_bounded_by_their_hosts_not_only_their_number() -> None:
    maps = HostMaps(keep=32, max_hosts=1000)
    keys = [maps.add({f"h{i}-{k}": "g" for i in range(400)}) for k in range(5)]
    assert [maps.get(k) is not None for k in keys] == [False, False, False, True, True]
    huge = maps.add({f"x{i}": "g" for i in range(5000)})  # one past the bound stays alone
    assert maps.get(huge) is not None and all(maps.get(k) is None for k in keys)


@pytest.mark.parametrize(
    "contents",
    [12, ["a"], "data:text/csv;base64," + "A" * (12 << 20)],
    ids=["a number", "a list", "12 MiB"],
)
def test_an_upload_that_is_no_mapping_file_is_said_not_parsed(contents: object) -> None:
    from podscope.app.main import create_app  # registers the pages
    from podscope.app.settings import AppSettings

    app = create_app(AppSettings())
    upload = sys.modules["pages.pod_viewer"].upload_mapping
    with app.server.test_request_context():
        kept, said = upload(contents, "racks.csv")
        assert kept is dash.no_update
        assert "racks.csv: not a file of at most 8 MiB" in said
        ok = "data:text/csv;base64," + base64.b64encode(b"h0,r0\n").decode()
        assert upload(ok, "racks.csv")[1] == ""

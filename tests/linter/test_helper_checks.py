"""A check that lives in a helper of another module, the act in its caller or a callee.

The shape of a DAO layer (OpenStack's ``segments_db``): one module looks the row up and
returns something made from it or nothing, another inserts it (``obj = Segment(...);
obj.create()``), and a manager in a third tests the answer and calls the insert.
"""
from __future__ import annotations

import textwrap

from txnsafety_lint.cli import main

DAO = """\
    from app.objects import network as network_obj


    def get_dynamic_segment(context, network_id, physnet=None):
        objs = network_obj.NetworkSegment.get_objects(context, network_id=network_id)
        if objs:
            return {"id": objs[0].id, "physnet": objs[0].physical_network}


    def add_network_segment(context, network_id, segment):
        netseg = network_obj.NetworkSegment(context, network_id=network_id,
                                            physical_network=segment["physnet"])
        netseg.create()
        segment["id"] = netseg.id
    """

MANAGER = """\
    from app.db import segments_db


    class TypeManager:
        def allocate_dynamic_segment(self, context, network_id, segment):
            dynamic_segment = segments_db.get_dynamic_segment(context, network_id,
                                                              segment.get("physnet"))
            if dynamic_segment:
                return dynamic_segment
            segment = self.reserve(context, segment)
            segments_db.add_network_segment(context, network_id, segment)
            return segment

        def reserve(self, context, segment):
            return dict(segment)
    """


def make(tmp_path, manager=MANAGER):
    for rel, text in {"pyproject.toml": "[tool.txnsafety]\n", "app/__init__.py": "",
                      "app/db/__init__.py": "", "app/db/segments_db.py": DAO,
                      "app/objects/__init__.py": "", "app/objects/network.py": "",
                      "app/plugins/managers.py": manager}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def lint(root, capsys, monkeypatch):
    monkeypatch.chdir(root)
    main([".", "--no-respect-gitignore"])
    return capsys.readouterr().out.splitlines()


def test_answer_of_a_helper_in_another_module_then_a_callee_inserts(tmp_path, capsys, monkeypatch):
    out = lint(make(tmp_path), capsys, monkeypatch)
    hits = [line for line in out if "managers.py:11:" in line and "TXN105" in line]
    assert hits, out
    assert "get_dynamic_segment()" in hits[0] and "add_network_segment()" in hits[0]


def test_the_insert_guarded_by_a_duplicate_entry_handler_is_quiet(tmp_path, capsys, monkeypatch):
    """oslo.db's ``DBDuplicateEntry`` (a project's wrapper of IntegrityError) guards the insert."""
    guarded = MANAGER.replace(
        "            segments_db.add_network_segment(context, network_id, segment)\n",
        "            try:\n"
        "                segments_db.add_network_segment(context, network_id, segment)\n"
        "            except db_exc.DBDuplicateEntry:\n"
        "                return segments_db.get_dynamic_segment(context, network_id)\n")
    assert guarded != MANAGER
    out = lint(make(tmp_path, guarded), capsys, monkeypatch)
    assert not [line for line in out if "TXN105" in line], out

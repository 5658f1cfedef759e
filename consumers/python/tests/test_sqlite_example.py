"""The SQLite example keeps exactly the expected state of a vector in its table."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
VECTOR = HERE.parents[1] / "vectors" / "relist-diff"


def test_the_table_holds_the_rebuilt_state(tmp_path):
    db = tmp_path / "objects.db"
    subprocess.run([sys.executable, str(HERE / "examples" / "sqlite_table.py"), "--records", str(VECTOR / "kafka.jsonl"), "--db", str(db)], check=True, env={**os.environ, "PYTHONPATH": str(HERE)})
    rows = sqlite3.connect(db).execute("SELECT resource, key, object FROM objects").fetchall()
    got = {}
    for resource, key, obj in rows:
        got.setdefault(resource, {})[key] = json.loads(obj)
    (cluster, expected), = json.loads((VECTOR / "expected.json").read_text())["clusters"].items()
    assert got == expected

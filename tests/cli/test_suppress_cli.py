"""`fedsentry suppress` on the database: add (with its checks naming the flag), list (the audit), remove."""

from __future__ import annotations

import subprocess
import sys


def fs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedsentry.cli", *args], capture_output=True, text=True, timeout=60)


def test_add_list_remove(tmp_path):
    db = f"sqlite:///{tmp_path}/s.db"
    added = fs("suppress", "add", "--reason", "backup", "--cidr", "10.0.0.0/24", "--port", "445",
               "--expires-hours", "2", "--by", "bob", "--db", db)
    assert added.returncode == 0, added.stderr
    rule = added.stdout.strip()
    listed = fs("suppress", "list", "--db", db).stdout.splitlines()
    assert listed[0].startswith("id\t") and rule in listed[1] and "\tbob\tactive\t" in listed[1]
    assert "cidr=10.0.0.0/24 port_min=445 port_max=445" in listed[1]
    assert fs("suppress", "remove", rule, "--by", "carol", "--db", db).returncode == 0
    assert "\tremoved\t" in fs("suppress", "list", "--db", db).stdout
    bad = fs("suppress", "add", "--reason", "x", "--cidr", "10.0.0.0/99", "--db", db)
    assert bad.returncode == 2 and "--cidr" in bad.stderr
    none = fs("suppress", "add", "--reason", "x", "--db", db)
    assert none.returncode == 2 and "at least one condition" in none.stderr
    ports = fs("suppress", "add", "--reason", "x", "--port", "9-1", "--db", db)
    assert ports.returncode == 2 and "--port: port_min: must not exceed port_max" in ports.stderr
    missing = fs("suppress", "remove", "0" * 32, "--db", db)
    assert missing.returncode == 2 and "no suppression rule" in missing.stderr

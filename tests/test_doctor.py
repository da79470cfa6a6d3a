"""`profkit doctor`: one line a check, ok / warn / fail with what to do; exit 1 on a failure."""

from __future__ import annotations

import shutil

from profkit.doctor import checks

from .conftest import NCU_DATA, cli, cli_json, needs_gpu_ncu_nsys


def test_doctor_lines_and_database(tmp_path):
    db = tmp_path / "p.db"
    assert cli("import", NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", db=db).exit_code == 0
    r = cli("doctor", db=db)
    lines = r.stdout.strip().splitlines()
    assert all(line.split()[0] in ("ok", "warn", "fail") for line in lines)
    names = [line.split(None, 1)[1].split(":")[0] for line in lines]
    assert names[:2] == ["GPU", "PyTorch"] and "database" in names and "disk" in names
    assert any(line.startswith("ok    database: ") and "1 runs, writable" in line for line in lines)
    if not shutil.which("nvidia-smi"):
        assert lines[0].startswith("warn  GPU: no nvidia-smi") and "--device cpu" in lines[0]
    assert r.exit_code == (1 if any(line.startswith("fail") for line in lines) else 0)
    found = cli_json("doctor", db=db)
    assert [c["name"] for c in found] == names and all(
        set(c) == {"name", "status", "detail", "advice"} for c in found
    )


def test_doctor_fails_on_an_unusable_database(tmp_path):
    (tmp_path / "notdb").write_text("hello")
    r = cli("doctor", db=tmp_path / "notdb")
    assert r.exit_code == 1 and any(l.startswith("fail  database: ") for l in r.stdout.splitlines())
    r = cli("doctor", db=tmp_path / "nofolder" / "p.db")
    assert r.exit_code == 1 and "its folder" in r.stdout


@needs_gpu_ncu_nsys
def test_doctor_on_a_gpu_machine(tmp_path):
    found = {c.name: c for c in checks(tmp_path / "p.db")}
    assert all(c.status == "ok" for c in found.values()), [
        c for c in found.values() if c.status != "ok"
    ]
    assert set(found) == {
        "GPU",
        "PyTorch",
        "ncu",
        "ncu counters",
        "nsys",
        "nsys import",
        "database",
        "disk",
    }

"""The import formats' registry (profkit.parse.formats, issue 22): every suffix is known by its
one format, and the import command's help, its "don't know how to import" hint and a run's
default name are all made from it; --help reads it without any reader."""

from __future__ import annotations

import gzip
from importlib import import_module

import pytest

from profkit.parse import detect, load
from profkit.parse.formats import FORMATS, import_help, match, run_name, unknown_hint

from .conftest import NCU_DATA, cli, cli_json, help_words, one_line_error
from .test_cli_startup import imported_modules

SUFFIXES = [s for f in FORMATS for s in f.all_suffixes]


def test_each_suffix_is_one_formats_in_any_case():
    assert len(SUFFIXES) == len(set(SUFFIXES))
    for f in FORMATS:
        for s in f.all_suffixes:
            for name in (f"x{s}", f"X{s.upper()}", f"a.b{s}"):
                found = match(name)
                assert found is not None and found.format == f and found.suffix == s, name
    for name in ("notes.txt", "x.gz", "x.db.gz", "x.csv.bz2", "csv", "x.ncu-rep.zip"):
        assert match(name) is None, name


def test_gzipped_forms_are_read_as_they_are_or_decompressed_first():
    assert match("x.csv.gz").in_place and match("x.json.gz").in_place  # the readers stream them
    # SQLite needs a file
    assert not match("x.sqlite.gz").in_place and match("x.sqlite.gz").unpacked_first
    # nsys exports it
    assert not match("x.nsys-rep").in_place and not match("x.nsys-rep").unpacked_first
    assert match("x.ncu-rep").in_place and match("x.db").in_place


def test_every_reader_is_there():
    for f in FORMATS:
        module, _, function = f.reader.partition(":")
        assert callable(getattr(import_module(f"profkit.parse.{module}"), function)), f.name


def test_help_and_hint_name_every_suffix(tmp_path):
    # a line may wrap after a hyphen
    help_text = "".join(help_words(cli("import", "--help").stdout).split())
    assert "".join(import_help().split()) in help_text
    (tmp_path / "notes.txt").write_text("x")
    r = cli("import", tmp_path / "notes.txt", db=tmp_path / "p.db")
    one_line_error(r, "don't know how to import notes.txt")
    assert unknown_hint() in r.stderr
    for s in SUFFIXES:
        # in the list
        assert f"{s}," in help_text or f"{s})" in help_text or f"{s};" in help_text, s
        assert f"{s}," in r.stderr or f"{s})" in r.stderr or f"{s};" in r.stderr, s
    assert not (tmp_path / "p.db").exists()


def test_help_imports_no_reader():
    modules = imported_modules("import", "--help")
    assert "profkit.parse.formats" in modules
    readers = {f"profkit.parse.{f.reader.partition(':')[0]}" for f in FORMATS} | {
        "profkit.parse.schema"
    }
    assert not readers & modules, readers & modules


@pytest.mark.parametrize(
    "name, base",
    [
        ("vgg16_fp16_eager.raw.csv.gz", "vgg16_fp16_eager"),
        ("a.ncu.raw.csv.gz", "a.ncu"),
        ("r.ncu-rep.gz", "r"),
        ("x.raw-mangled.csv.gz", "x.raw-mangled"),
        ("t.torch.json.gz", "t.torch"),
        ("n.nsys.sqlite.gz", "n.nsys"),
        ("report1.nsys-rep", "report1"),
        ("report1.profkit.sqlite", "report1"),
        ("report1.profkit.sqlite.gz", "report1"),
        (".profkit.sqlite", ".profkit"),
        ("cap.qdstrm", "cap"),
        ("e.db", "e"),
        ("K.CSV", "K"),
        ("notes.txt", "notes.txt"),
    ],
)
def test_default_run_name(name, base):
    assert run_name(name) == base


def test_an_import_is_named_after_its_file(tmp_path):
    src = NCU_DATA / "vgg16_fp16_eager.raw.csv.gz"
    r = cli("import", src, db=tmp_path / "p.db")
    assert r.exit_code == 0, r.stderr
    assert [run["name"] for run in cli_json("runs", db=tmp_path / "p.db")] == ["vgg16_fp16_eager"]


def test_detect_and_load_follow_the_registry(tmp_path):
    """A plain CSV and the same CSV gzipped read alike; the gzipped one where it is."""
    src = NCU_DATA / "vgg16_fp16_eager.raw.csv.gz"
    plain = tmp_path / "v.csv"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    assert detect(plain).format.name == detect(src).format.name == "ncu-csv"
    a, b = load(plain), load(src)
    assert list(a.rows) == list(b.rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.csv"]  # nothing decompressed beside it
